// Command ibkube-node-agent advertises a node's InfiniBand/RDMA HCAs to the
// kubelet as shared (rdma/shared_ib) and exclusive (rdma/ib) resources.
package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/go-logr/logr"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/internal/cmdline"
	"github.com/ibkube/ibkube/internal/logging"
	"github.com/ibkube/ibkube/node/agent"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/node/imagefs"
	"github.com/ibkube/ibkube/node/memlock"
	"github.com/ibkube/ibkube/node/nri"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	os.Exit(cmdline.Exit(os.Stderr, "ibkube-node-agent", err))
}

func run(ctx context.Context, args []string) error {
	opts, err := parseFlags(args, os.Getenv, os.Stderr)
	if err != nil || opts.help {
		return err
	}
	log, err := logging.New(opts.logLevel, "json", os.Stderr)
	if err != nil {
		return err
	}
	cluster := inClusterAPI(opts.nodeName, log)
	if cluster != nil {
		defer cluster.stop()
	}
	if opts.removeLabels {
		if cluster == nil {
			return errors.New("--remove-partition-labels needs the in-cluster API")
		}
		return removePartitionLabels(ctx, cluster.cs, log)
	}
	a, err := newAgent(opts, cluster, log)
	if err != nil {
		return err
	}
	if err := addDRAServer(ctx, a, opts, cluster, log); err != nil {
		return err
	}
	if err := addMemlockPlugin(a, opts, cluster, log); err != nil {
		return err
	}
	podres, err := newPodResources(opts)
	if err != nil {
		return err
	}
	if podres != nil {
		defer podres.Close()
	}
	src := newAgentSource(a, opts, log)
	addSharedGuard(a, podres, src, log.WithName("server"))
	if err := addCounterMonitor(a, opts, cluster, podres, src, log); err != nil {
		return err
	}
	return a.Run(ctx)
}

// addMemlockPlugin runs the NRI plugin beside the agent: memlock (see
// docs/memlock.md) and, with --nccl-rank-conf, the NCCL conf file for
// processes started without the container's environment (docs/node-agent.md,
// MPI ranks); with --nri=false it only says so.
// cluster is nil outside a cluster: decisions are then only logged.
func addMemlockPlugin(a *agent.Agent, opts options, cluster *api, log logr.Logger) error {
	log = log.WithName("memlock")
	if !opts.nri {
		log.Info("NRI memlock plugin disabled (--nri=false): RDMA containers keep the runtime's default memlock")
		return nil
	}
	maxV, err := memlock.ParseMax(opts.memlockMax)
	if err != nil {
		return err
	}
	cfg := nri.Config{SocketPath: opts.nriSocket, ProcRoot: opts.procRoot, Max: maxV, GIDs: nri.SysfsGIDs{Root: opts.sysfsRoot, ProcRoot: opts.procRoot}}
	if opts.ncclRankConf {
		cfg.RankConfDir = filepath.Join(opts.stateDir, "nccl-ranks")
		if opts.containerd.address != "" {
			// The chart drops CAP_SYS_ADMIN, which hides overlayfs's opaque
			// marks; reading such directories as merged keeps the common
			// image (/etc touched in several layers) on its passwd home.
			cfg.Image = imagefs.Containerd{Address: opts.containerd.address, Namespace: opts.containerd.namespace,
				Snapshotters: strings.Split(opts.containerd.snapshotters, ","), MergeHidden: true}
		}
	}
	var events nri.EventSink
	if cluster != nil {
		events = nri.RecorderSink{Recorder: cluster.recorder}
	}
	p, err := nri.NewPlugin(cfg, a, log, a.Registry(), events)
	if err != nil {
		return err
	}
	a.Add(p.Run)
	return nil
}

// newAgent turns the options into an agent; it reads the config file and
// builds the scanner but starts nothing. cluster (nil outside a cluster)
// supplies the Node's instance-type label.
func newAgent(opts options, cluster *api, log logr.Logger) (*agent.Agent, error) {
	cfg, err := config.Load(opts.config)
	if err != nil {
		return nil, err
	}
	dopts := discovery.Options{SysfsRoot: opts.sysfsRoot, DevRoot: opts.devRoot, Logger: log}
	if opts.netlink {
		dopts.Netlink = discovery.SystemNetlink{}
	}
	scanner := discovery.NewScanner(dopts)
	acfg := agent.Config{
		Agent:            cfg,
		Scanner:          scanner,
		SysfsRoot:        opts.sysfsRoot,
		HostDevRoot:      opts.hostDevRoot,
		KubeletSocketDir: opts.kubeletSocketDir,
		StateDir:         opts.stateDir,
		NodeName:         opts.nodeName,
		MetricsAddr:      opts.metricsAddr,
		HealthAddr:       opts.healthAddr,
	}
	if cluster != nil {
		acfg.Nodes = cluster
		acfg.Labels = cluster
	}
	return agent.New(acfg, log)
}
