package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/cmdline"
	"github.com/ibkube/ibkube/internal/logging"
	"github.com/ibkube/ibkube/node/counters"
	"github.com/ibkube/ibkube/node/imagefs"
)

// options is everything the command line says.
type options struct {
	config           string
	sysfsRoot        string
	devRoot          string
	procRoot         string
	hostDevRoot      string
	kubeletSocketDir string
	nodeName         string
	stateDir         string
	netlink          bool
	nri              bool
	nriSocket        string
	ncclRankConf     bool
	containerd       containerdOptions
	memlockMax       string
	metricsAddr      string
	healthAddr       string
	logLevel         string
	help             bool
	// removeLabels: take the partition label off every Node and exit.
	removeLabels bool
	observe      observeOptions
	dra          draOptions
}

// containerdOptions say where the NRI plugin reads a container's image
// (its /etc/passwd, for the user's home).
type containerdOptions struct {
	address      string
	namespace    string
	snapshotters string
}

// observeOptions configure the counters monitor (node/counters).
type observeOptions struct {
	counters           bool
	period             time.Duration
	idleWindow         time.Duration
	idleMinBytes       uint64
	podResourcesSocket string
	// splitJobs lists each local job's running pods cluster-wide.
	splitJobs bool
}

// parseFlags reads args (without the program name); getenv supplies
// $NODE_NAME. Usage and errors go to out.
func parseFlags(args []string, getenv func(string) string, out io.Writer) (o options, err error) {
	fs := flagSet(&o, getenv, out)
	o.help, err = cmdline.Parse(fs, args, func() error { return o.check(fs) })
	return o, err
}

// flagSet defines the command line into o; a test reads its defaults.
func flagSet(o *options, getenv func(string) string, out io.Writer) *flag.FlagSet {
	fs := cmdline.NewFlagSet("ibkube-node-agent", out)
	fs.StringVar(&o.config, "config", "/etc/ibkube/agent.yaml", "AgentConfig file (missing: built-in defaults, rdma/shared_ib shared and rdma/ib exclusive over InfiniBand mlx5 HCAs)")
	fs.StringVar(&o.sysfsRoot, "sysfs-root", "/sys", "directory that stands for /sys, where the agent reads (e.g. /host/sys in a pod)")
	fs.StringVar(&o.devRoot, "dev-root", "/dev", "directory that stands for /dev, where the agent reads")
	fs.StringVar(&o.procRoot, "proc-root", "/proc", "directory that stands for /proc (the NRI plugin reads the runtime's limits there)")
	fs.StringVar(&o.hostDevRoot, "host-dev-root", "/dev", "the dev tree as the kubelet sees it: prefix of the device paths handed to containers")
	fs.StringVar(&o.kubeletSocketDir, "kubelet-socket-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device plugin directory (kubelet.sock and plugin sockets)")
	fs.StringVar(&o.nodeName, "node-name", getenv("NODE_NAME"), "this node's name (default $NODE_NAME); its node.kubernetes.io/instance-type label picks the NCCL profile")
	fs.StringVar(&o.stateDir, "state-dir", "/var/lib/ibkube", "host directory for files handed to containers (NCCL topology XML); must be the same path inside the agent's pod")
	fs.BoolVar(&o.netlink, "netlink", true, "list RDMA devices over netlink and follow rtnetlink link events (false for fake sysfs trees)")
	fs.BoolVar(&o.nri, "nri", true, "run the NRI plugin that raises RLIMIT_MEMLOCK for RDMA containers")
	fs.BoolVar(&o.ncclRankConf, "nccl-rank-conf", true, "with --nri: give each RDMA container a read-only ~/.nccl.conf (written under --state-dir) holding the NCCL settings of its main process, so that processes it starts with an empty environment (MPI ranks over SSH) resolve the same ones")
	fs.StringVar(&o.containerd.address, "containerd-address", imagefs.DefaultContainerdAddress, "with --nccl-rank-conf: containerd's socket, through which the image's /etc/passwd is read from the container's snapshot for the user's home (empty: use HOME and the uid only)")
	fs.StringVar(&o.containerd.namespace, "containerd-namespace", imagefs.DefaultContainerdNamespace, "containerd namespace of the CRI plugin's containers")
	fs.StringVar(&o.containerd.snapshotters, "containerd-snapshotters", imagefs.DefaultSnapshotter, "comma-separated snapshotters the containers' snapshots may be in, tried in order (bind and overlay mounts are read; the directories must be at their host paths in the agent)")
	fs.StringVar(&o.nriSocket, "nri-socket", "/var/run/nri/nri.sock", "the container runtime's NRI socket")
	fs.StringVar(&o.memlockMax, "memlock-max", "", "cap on the memlock limit the NRI plugin sets: unlimited or a quantity like 64Gi (default: what the runtime holds)")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8090", "Prometheus /metrics address (0: off)")
	fs.StringVar(&o.healthAddr, "health-probe-bind-address", ":8091", "/healthz, /readyz and /inventory address (0: off)")
	fs.BoolVar(&o.observe.counters, "counters", true, "read the HCA port counters for /metrics, the RDMA idle warning and link-error Events")
	fs.DurationVar(&o.observe.period, "counters-period", 15*time.Second, "how often the port counters are read")
	fs.BoolVar(&o.observe.splitJobs, "split-jobs", false, "list the running pods of each job holding HCAs here, in every namespace such a job runs, for the RDMAJobSplit Event and ibkube_rdma_job_partitions (needs list on pods cluster-wide; docs/partitions.md)")
	fs.DurationVar(&o.observe.idleWindow, "rdma-idle-window", 10*time.Minute, "a container holding RDMA devices whose HCAs move less than --rdma-idle-min-bytes in this window gets an RDMAIdle Event")
	fs.Uint64Var(&o.observe.idleMinBytes, "rdma-idle-min-bytes", 1<<20, "traffic (bytes, both directions, all the container's HCAs) below which a window counts as idle")
	fs.StringVar(&o.observe.podResourcesSocket, "pod-resources-socket", counters.PodResourcesSocket, "the kubelet's PodResources API socket (which container holds which device); empty: no attribution, no idle warning")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: error, info or debug")
	fs.BoolVar(&o.removeLabels, "remove-partition-labels", false, "remove the "+contract.LabelPartition+" label from every Node and exit (the chart's pre-delete hook; needs list and patch on nodes)")
	addDRAFlags(fs, &o.dra, getenv)
	return fs
}

// check validates the parsed command line.
func (o *options) check(fs *flag.FlagSet) error {
	if err := cmdline.NoArgs(fs); err != nil {
		return err
	}
	if o.observe.period <= 0 {
		return fmt.Errorf("--counters-period %s: want a positive duration such as 15s", o.observe.period)
	}
	if o.observe.idleWindow < 2*o.observe.period {
		return fmt.Errorf("--rdma-idle-window %s: want at least two --counters-period (%s), else no window holds two readings", o.observe.idleWindow, 2*o.observe.period)
	}
	if _, err := logging.ParseLevel(o.logLevel); err != nil {
		return err
	}
	return o.dra.validate()
}
