package main

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"

	"github.com/ibkube/ibkube/node/counters"
	"github.com/ibkube/ibkube/node/doctor"
	"github.com/ibkube/ibkube/node/dra/holds"
	"github.com/ibkube/ibkube/node/memlock"
)

// runDoctor checks the node (or fake roots) and prints one line per check;
// it exits 1 when a check fails.
func runDoctor(ctx context.Context, args []string, s stdio) error {
	cmd := newHostCommand("doctor", s, []string{"text", "json"}, "output format: text or json")
	fs, host := cmd.fs, cmd.host
	procRoot := fs.String("proc-root", "/proc", "where to read /proc (kernel modules, the runtime's limits)")
	nri := fs.Bool("nri", true, "check the NRI socket (the agent's --nri)")
	nriSocket := fs.String("nri-socket", memlock.DefaultSocketPath, "the runtime's NRI socket (the agent's --nri-socket)")
	kubeletSocketDir := fs.String("kubelet-socket-dir", doctor.DefaultKubeletSocketDir, "the kubelet's device plugin directory (the agent's --kubelet-socket-dir), read for other plugins registering ibkube's resources")
	podResources := fs.String("pod-resources-socket", counters.PodResourcesSocket, "the kubelet's PodResources API socket, read for HCAs held exclusively and shared at once (empty: not checked)")
	cdiDir := fs.String("cdi-dir", holds.DefaultCDIDir, "the DRA driver's CDI directory (the agent's --cdi-dir), read for HCAs held both exclusively and shared (empty: not checked)")
	stateDir := fs.String("state-dir", "/var/lib/ibkube", "the agent's --state-dir, where it records the HCAs each shared slot got")
	memlockMax := fs.String("memlock-max", "", `the agent's --memlock-max ("unlimited", "64Gi"; empty: what the runtime holds)`)
	var maxV *uint64
	cfg, done, err := cmd.parse(args, func() (err error) {
		maxV, err = memlock.ParseMax(*memlockMax)
		return err
	})
	if done {
		return err
	}
	o := doctor.Options{
		SysfsRoot: *host.sysfsRoot, DevRoot: *host.devRoot, ProcRoot: *procRoot, Netlink: host.netlink(),
		NRI: *nri, NRISocket: *nriSocket, MemlockMax: maxV, Config: cfg, KubeletSocketDir: *kubeletSocketDir,
		PodResourcesSocket: *podResources, StateDir: *stateDir, CDIDir: *cdiDir,
		Logger: logr.Discard(),
	}
	report := doctor.Check(doctor.Gather(ctx, o))
	if *cmd.output == "json" {
		err = report.WriteJSON(s.out)
	} else {
		err = report.WriteText(s.out)
	}
	if err != nil {
		return fmt.Errorf("doctor: write report: %w", err)
	}
	if report.Failed {
		return exitError{code: 1}
	}
	return nil
}
