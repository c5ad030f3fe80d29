package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/internal/testing/kubeletstub"
)

// BenchmarkAgentRSS builds the agent binary, runs it on the ND H100 v5
// fixture against a stub kubelet until it has served both pools, and reports
// its resident memory (VmRSS, VmHWM) from /proc: with the counters monitor
// (the default) and without it, to show what reading the counters costs.
func BenchmarkAgentRSS(b *testing.B) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"counters", []string{"--counters-period=1s", "--rdma-idle-window=2s"}},
		{"no-counters", []string{"--counters=false"}},
	} {
		b.Run(tc.name, func(b *testing.B) { benchAgentRSS(b, tc.args) })
	}
}

func benchAgentRSS(b *testing.B, extra []string) {
	tmp := b.TempDir()
	bin := filepath.Join(tmp, "ibkube-node-agent")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	dir := filepath.Join(tmp, "host")
	if err := fixture.Build(dir, fixture.NDv5); err != nil {
		b.Fatal(err)
	}
	sockets := filepath.Join(tmp, "sock")
	if err := os.Mkdir(sockets, 0o755); err != nil {
		b.Fatal(err)
	}
	stub := kubeletstub.Start(b, sockets)
	cmd := exec.Command(bin, "--config", filepath.Join(tmp, "none.yaml"),
		"--sysfs-root", fixture.SysfsRoot(dir), "--dev-root", fixture.DevRoot(dir), "--netlink=false", "--nri=false",
		"--kubelet-socket-dir", sockets, "--state-dir", filepath.Join(tmp, "state"),
		"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0",
		"--pod-resources-socket", filepath.Join(tmp, "pod-resources.sock"))
	cmd.Args = append(cmd.Args, extra...)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for _, r := range []string{"rdma/ib", "rdma/shared_ib"} {
		if _, err := stub.WaitList(r, 20*time.Second, func([]*pluginapi.Device) bool { return true }); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond) // let start-up garbage settle
	var rss, hwm float64
	for b.Loop() {
		rss, hwm = procStatusKiB(b, cmd.Process.Pid, "VmRSS"), procStatusKiB(b, cmd.Process.Pid, "VmHWM")
	}
	b.ReportMetric(rss/1024, "rss-MiB")
	b.ReportMetric(hwm/1024, "peak-rss-MiB")
}

func procStatusKiB(b *testing.B, pid int, field string) float64 {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("%s not in /proc/%d/status", field, pid)
	return 0
}
