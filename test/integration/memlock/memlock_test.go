//go:build integration

// Package memlock tests the node agent's NRI memlock plugin against a real
// containerd 2.x and runc started by the test: containers that hold an
// ibkube RDMA char device, run as uid 1000 with no added capabilities, get
// the RLIMIT_MEMLOCK their pod asks for; others keep the runtime's default;
// a request above what the runtime holds is clamped and the container still
// starts.
//
// containerd runs under `prlimit --memlock=65536:8388608`: no process here
// can raise a hard memlock above 8 MiB, so a low soft default (64 KiB) is
// what makes the raise visible.
//
// NRI only sees containers created through CRI (containerd registers no NRI
// domain for ctr/containerd-client containers, and pod annotations come
// from the CRI sandbox), so the test drives containerd's CRI service with
// k8s.io/cri-api, as the kubelet does.
package memlock

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/internal/testing/testenv"
	"github.com/ibkube/ibkube/node/imagefs"
	"github.com/ibkube/ibkube/node/memlock"
	"github.com/ibkube/ibkube/node/nri"
)

const (
	runtimeSoft  = 64 << 10 // containerd's soft memlock in this test
	runtimeHard  = 8 << 20  // and its hard one
	imageRef     = "docker.io/ibkube/memlock-probe:test"
	cgroupParent = "/ibkube-memlock-test"
	uverbsMajor  = 231
	uverbsMinor  = 192
)

type staticInventory inventory.Node

func (s staticInventory) Inventory() inventory.Node { return inventory.Node(s) }

func TestMemlockThroughNRI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: starts containerd and runc, mknods a char device")
	}
	root := repoRoot(t)
	bin := filepath.Join(root, "_output", "bin", "containerd")
	containerd := tool(t, "CONTAINERD_BIN", "containerd", filepath.Join(bin, "containerd"), "containerd")
	ctr := tool(t, "CONTAINERD_BIN", "ctr", filepath.Join(bin, "ctr"), "containerd")
	shim := tool(t, "CONTAINERD_BIN", "containerd-shim-runc-v2", filepath.Join(bin, "containerd-shim-runc-v2"), "containerd")
	runc := tool(t, "RUNC", "runc", "/usr/sbin/runc", "apt-deps")
	prlimit := tool(t, "PRLIMIT", "prlimit", "/usr/bin/prlimit", "apt-deps")

	base := t.TempDir()
	created := missingDirs("/run/containerd/s", "/run/containerd")
	t.Cleanup(func() { teardown(t, base, runc, cgroupParent, created) })
	for _, d := range []string{"root", "state", "nri-plugins", "cni", "dev", "logs"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// A fake uverbs node: the major:minor the plugin's inventory lists.
	uverbs := filepath.Join(base, "dev", "uverbs0")
	if err := syscall.Mknod(uverbs, syscall.S_IFCHR|0o666, int(uverbsMajor<<8|uverbsMinor)); err != nil {
		t.Fatalf("mknod %s: %v", uverbs, err)
	}

	probe := buildProbe(t, base)
	// The probe image's passwd is Kubeflow mpi-operator's base image's
	// (useradd -m mpiuser: uid 1000, home /home/mpiuser); the hostile ones
	// try to reach the host through the agent's read of it.
	passwd := "root:x:0:0:root:/root:/bin/sh\nmpiuser:x:1000:1000::/home/mpiuser:/bin/sh\n"
	images := map[string][]entry{
		imageRef:                  {{name: "etc/passwd", data: passwd}},
		hostileRef("shadow-link"): {{name: "etc/passwd", link: "/etc/shadow"}},
		// 9 MiB of lines, uid 1000's entry last: read whole, it would give
		// a home; the agent reads 1 MiB and gives none. (containerd 2.4
		// itself refuses a passwd over 10 MiB, "exceeds 10485760 bytes",
		// when it reads the file for the user's groups before NRI's
		// CreateContainer, so a 100 MB one never reaches the plugin.)
		hostileRef("9mb"):         {{name: "etc/passwd", size: 9 << 20, data: "mpiuser:x:1000:1000::/home/mpiuser:/bin/sh\n"}},
		hostileRef("dotdot-home"): {{name: "etc/passwd", data: "mpiuser:x:1000:1000::../../..:/bin/sh\n"}},
		hostileRef("proc-home"):   {{name: "etc/passwd", data: "mpiuser:x:1000:1000::/proc/self/root/etc:/bin/sh\n"}},
		// A home that is not UTF-8: NRI's messages carry UTF-8 strings, and
		// a reply naming it failed the container's creation.
		hostileRef("non-utf8-home"): {{name: "etc/passwd", data: "mpiuser:x:1000:1000::/home/\xff\xfe:/bin/sh\n"}},
	}

	cfg := filepath.Join(base, "config.toml")
	if err := os.WriteFile(cfg, []byte(containerdConfig(base, runc, imageRef)), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(base, "containerd.log")
	start := func() *daemon {
		return startDaemon(t, logPath, "PATH="+filepath.Dir(shim)+":"+os.Getenv("PATH"),
			prlimit, fmt.Sprintf("--memlock=%d:%d", runtimeSoft, runtimeHard), "--", containerd, "--config", cfg, "--log-level", "info")
	}
	cur := start()
	t.Cleanup(func() {
		cur.stop()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				lines := strings.Split(string(b), "\n")
				t.Logf("containerd log (last 40 lines):\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
			}
		}
	})

	ctx, cancel := ctxT(t)
	defer cancel()

	sock := filepath.Join(base, "containerd.sock")
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rt := cri.NewRuntimeServiceClient(conn)
	testenv.Eventually(t, 60*time.Second, "containerd's CRI service", func() error {
		select {
		case <-cur.exited:
			t.Fatal("containerd exited early")
		default:
		}
		_, err := rt.Version(ctx, &cri.VersionRequest{})
		return err
	})

	// The plugin, as the node agent runs it, against containerd's NRI socket.
	rankDir := filepath.Join(base, "nccl-ranks")
	events := &rankEvents{ch: make(chan rankEvent, 100)}
	plugin, err := nri.NewPlugin(nri.Config{
		SocketPath:  filepath.Join(base, "nri.sock"),
		ProcRoot:    "/proc",
		MinBackoff:  100 * time.Millisecond,
		RankConfDir: rankDir,
		Image:       imagefs.Containerd{Address: sock, Namespace: "k8s.io", Snapshotters: []string{"native"}},
	}, staticInventory{HCAs: []inventory.HCA{{Name: "mlx5_0", CharDevices: []inventory.CharDevice{
		{Name: "uverbs0", Major: uverbsMajor, Minor: uverbsMinor, Present: true},
	}}}}, testr.New(t), prometheus.NewRegistry(), events)
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithCancel(ctx)
	pdone := make(chan error)
	go func() { pdone <- plugin.Run(pctx) }()
	defer func() { pcancel(); <-pdone }()
	testenv.Eventually(t, 30*time.Second, "the plugin to register with containerd's NRI", func() error {
		if s := plugin.State(); s != nri.StateConnected {
			return fmt.Errorf("state %s", s)
		}
		return nil
	})
	wantRuntime := &memlock.RuntimeLimit{PID: cur.cmd.Process.Pid, Source: "peer", Limit: memlock.Limit{Soft: runtimeSoft, Hard: runtimeHard}}
	if diff := cmp.Diff(wantRuntime, plugin.RuntimeLimit()); diff != "" {
		t.Errorf("runtime limit learned over SO_PEERCRED (-want +got):\n%s", diff)
	}

	for ref, extra := range images {
		image := filepath.Join(base, strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
		writeImage(t, probe, image, ref, extra...)
		if out, err := exec.CommandContext(ctx, ctr, "--address", sock, "-n", "k8s.io", "images", "import", "--local",
			"--snapshotter", "native", "--platform", "linux/"+runtime.GOARCH, image).CombinedOutput(); err != nil {
			t.Fatalf("ctr images import %s: %v\n%s", ref, err, out)
		}
		os.Remove(image)
	}

	device := &cri.Device{ContainerPath: "/dev/infiniband/uverbs0", HostPath: uverbs, Permissions: "rw"}
	tests := []struct {
		name    string
		memlock string // pod annotation; "" for none
		devices []*cri.Device
		want    string
	}{
		{"rdma-8mi", "8Mi", []*cri.Device{device}, "memlock soft=8388608 hard=8388608 uid=1000 devices=uverbs0"},
		{"no-devices", "8Mi", nil, "memlock soft=65536 hard=8388608 uid=1000 devices="},
		{"rdma-unlimited", "unlimited", []*cri.Device{device}, "memlock soft=8388608 hard=8388608 uid=1000 devices=uverbs0"},
		{"rdma-bad-value", "lots", []*cri.Device{device}, "memlock soft=65536 hard=8388608 uid=1000 devices=uverbs0"},
		{"rdma-no-annotation", "", []*cri.Device{device}, "memlock soft=65536 hard=8388608 uid=1000 devices=uverbs0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runProbe(ctx, t, rt, base, tt.name, tt.memlock, tt.devices)
			if got != tt.want {
				t.Errorf("container printed %q\n                    want %q", got, tt.want)
			}
			t.Logf("memlock=%q devices=%d: %s", tt.memlock, len(tt.devices), got)
		})
	}

	// MPI ranks: a root container holding the device gets a read-only
	// /root/.nccl.conf with its NCCL environment and the profile's conf
	// (containerd tells NRI the container's uid); a uid-1000 container
	// without HOME gets none. The file goes with the container.
	t.Run("nccl-rank-conf", func(t *testing.T) {
		ann := map[string]string{contract.AnnotationNCCLConf: "NCCL_IB_PCI_RELAXED_ORDERING=1\nNCCL_IB_HCA=profile-loses\n"}
		env := []*cri.KeyValue{{Key: "NCCL_IB_HCA", Value: []byte("=mlx5_0:1")}, {Key: "NCCL_CONF_FILE", Value: []byte(contract.NCCLConfFile)}}
		var id string
		t.Run("root", func(t *testing.T) {
			var got string
			got, id = runContainer(ctx, t, rt, base, probeRun{name: "rank-root", annotations: ann, devices: []*cri.Device{device}, uid: 0, env: env,
				args: []string{"cat", "/root/.nccl.conf"}, line: "file "})
			want := memlock.DecideRankConf(memlock.RankInput{PodAnnotations: ann, UID: ptrTo(uint32(0)),
				Devices:   []memlock.Device{{Path: "/dev/infiniband/uverbs0", Type: "c", Major: uverbsMajor, Minor: uverbsMinor}},
				IBDevices: memlock.DeviceSet{{uverbsMajor, uverbsMinor}: "uverbs0"}, Env: []string{"NCCL_IB_HCA==mlx5_0:1", "NCCL_CONF_FILE=" + contract.NCCLConfFile}})
			if want.Outcome != memlock.RankWritten || got != "file "+strconv.Quote(want.Content) {
				t.Errorf("root container's /root/.nccl.conf:\n got %s\nwant file %q", got, want.Content)
			}
			if !strings.Contains(got, `NCCL_IB_HCA==mlx5_0:1\n`) || !strings.Contains(got, `NCCL_IB_PCI_RELAXED_ORDERING=1\n`) {
				t.Errorf("the file lacks the environment's NCCL_IB_HCA or the profile's line: %s", got)
			}
		})
		// Kubeflow's non-root image: no HOME in the spec, the passwd home.
		// The image holds no NCCL the agent can name, so the file carries
		// no comment line (an NCCL before 2.26.2 would read one holding
		// '=' as a variable).
		t.Run("uid-1000-passwd-home", func(t *testing.T) {
			got, _ := runContainer(ctx, t, rt, base, probeRun{name: "rank-1000", annotations: ann, devices: []*cri.Device{device}, uid: 1000, env: env,
				args: []string{"cat", "/home/mpiuser/.nccl.conf", "/root/.nccl.conf"}, line: "file"})
			if !strings.HasPrefix(got, `file "NCCL_`) || strings.Contains(got, `#`) || !strings.Contains(got, `NCCL_IB_HCA==mlx5_0:1\n`) || !strings.HasSuffix(got, " absent") {
				t.Errorf("uid-1000 container without HOME: %s, want /home/mpiuser/.nccl.conf and no /root/.nccl.conf", got)
			}
		})
		t.Run("uid-1000-home-tmp", func(t *testing.T) {
			withHome := append([]*cri.KeyValue{{Key: "HOME", Value: []byte("/tmp")}}, env...)
			got, _ := runContainer(ctx, t, rt, base, probeRun{name: "rank-1000-tmp", annotations: ann, devices: []*cri.Device{device}, uid: 1000, env: withHome,
				args: []string{"cat", "/home/mpiuser/.nccl.conf", "/tmp/.nccl.conf"}, line: "file"})
			parts := strings.SplitN(strings.TrimPrefix(got, "file "), `" "`, 2)
			if len(parts) != 2 || !strings.Contains(parts[0], `NCCL_IB_HCA==mlx5_0:1\n`) || parts[0]+`"` != `"`+parts[1] {
				t.Errorf("uid-1000 container with HOME=/tmp: %s, want the same file at /home/mpiuser and /tmp", got)
			}
		})
		drainEvents(events)
		t.Run("uid-without-passwd-entry", func(t *testing.T) {
			got, _ := runContainer(ctx, t, rt, base, probeRun{name: "rank-4242", annotations: ann, devices: []*cri.Device{device}, uid: 4242, env: env,
				args: []string{"cat", "/home/mpiuser/.nccl.conf", "/root/.nccl.conf", "/.nccl.conf"}, line: "file"})
			if got != "file absent absent absent" {
				t.Errorf("uid without a passwd entry: %s, want no file", got)
			}
			e := nextEvent(t, events)
			if e.c.Outcome != memlock.RankNoPasswd || !strings.Contains(e.c.Reason, "ssh") {
				t.Errorf("event = %s: %s, want no_passwd saying ssh ranks cannot run", e.c.Outcome, e.c.Reason)
			}
		})
		// Images whose /etc/passwd would have the agent read the host's
		// secrets, read without bound, or mount the file outside the container:
		// every container starts, nothing on the host changes, no file is
		// mounted, and the pod hears why. An image whose /etc/passwd is a
		// FIFO never reaches the plugin: containerd 2.4's own
		// WithAdditionalGIDs (pkg/oci/spec_opts.go UserFromFS) opens it
		// before NRI's CreateContainer and blocks there; the plugin's read
		// of a FIFO is covered by node/imagefs's tests.
		shadowBefore := fileDigest(t, "/etc/shadow")
		ranksBefore := dirNames(t, rankDir)
		for _, h := range []struct{ name, want string }{
			{"shadow-link", string(memlock.RankNoPasswd)},
			{"9mb", string(memlock.RankNoHome)},
			{"dotdot-home", string(memlock.RankNoHome)},
			{"proc-home", string(memlock.RankNoHome)},
			{"non-utf8-home", string(memlock.RankNoHome)},
		} {
			t.Run("hostile-"+h.name, func(t *testing.T) {
				drainEvents(events)
				start := time.Now()
				got, id := runContainer(ctx, t, rt, base, probeRun{name: "hostile-" + h.name, image: hostileRef(h.name), annotations: ann, devices: []*cri.Device{device}, uid: 1000, env: env,
					args: []string{"cat", "/home/mpiuser/.nccl.conf", "/.nccl.conf", "/proc/self/root/etc/.nccl.conf"}, line: "file"})
				t.Logf("%s: container created, ran and exited in %s", h.name, time.Since(start).Round(time.Millisecond))
				if got != "file absent absent absent" {
					t.Errorf("%s: %s, want no file", h.name, got)
				}
				if e := nextEvent(t, events); string(e.c.Outcome) != h.want {
					t.Errorf("%s: event %s (%s), want %s", h.name, e.c.Outcome, e.c.Reason, h.want)
				}
				if _, err := os.Stat(filepath.Join(rankDir, id+".nccl.conf")); !os.IsNotExist(err) {
					t.Errorf("%s: a conf file was written on the host: %v", h.name, err)
				}
			})
		}
		if d := fileDigest(t, "/etc/shadow"); d != shadowBefore {
			t.Error("the host's /etc/shadow changed")
		}
		if d := cmp.Diff(ranksBefore, dirNames(t, rankDir)); d != "" {
			t.Errorf("the conf directory changed (-before +after):\n%s", d)
		}
		// The root container exited and its pod was removed when its
		// subtest ended: containerd relayed StopContainer and
		// RemoveContainer through NRI, and the plugin deleted the file the
		// container read above.
		testenv.Eventually(t, 30*time.Second, "the root container's file to go", func() error {
			if _, err := os.Stat(filepath.Join(rankDir, id+".nccl.conf")); !os.IsNotExist(err) {
				return fmt.Errorf("stat: %v", err)
			}
			return nil
		})
	})

	// containerd restarts: the plugin notices, registers with the new
	// process (and learns its limits again), and keeps raising memlock.
	t.Run("runtime-restart", func(t *testing.T) {
		cur.stop()
		testenv.Eventually(t, 30*time.Second, "the plugin to notice containerd is gone", func() error {
			if s := plugin.State(); s == nri.StateConnected {
				return fmt.Errorf("state %s", s)
			}
			return nil
		})
		t.Logf("containerd stopped: plugin state %s", plugin.State())
		cur = start()
		testenv.Eventually(t, 60*time.Second, "the plugin to register again", func() error {
			if s := plugin.State(); s != nri.StateConnected {
				return fmt.Errorf("state %s", s)
			}
			return nil
		})
		if rl := plugin.RuntimeLimit(); rl == nil || rl.PID != cur.cmd.Process.Pid {
			t.Errorf("runtime after restart = %+v, want pid %d", rl, cur.cmd.Process.Pid)
		}
		got := runProbe(ctx, t, rt, base, "after-restart", "8Mi", []*cri.Device{device})
		if want := "memlock soft=8388608 hard=8388608 uid=1000 devices=uverbs0"; got != want {
			t.Errorf("after restart the container printed %q, want %q", got, want)
		}
		t.Logf("after restart: %s", got)
	})
}

// runProbe runs the probe in its own pod (host network, uid 1000, no added
// capabilities) and returns the line it printed.
func runProbe(ctx context.Context, t *testing.T, rt cri.RuntimeServiceClient, base, name, memlockValue string, devices []*cri.Device) string {
	t.Helper()
	annotations := map[string]string{}
	if memlockValue != "" {
		annotations[contract.AnnotationMemlock] = memlockValue
	}
	text, _ := runContainer(ctx, t, rt, base, probeRun{name: name, annotations: annotations, devices: devices, uid: 1000, args: []string{"limits"}, line: "memlock "})
	return text
}

// probeRun says how to run the probe in its own pod.
type probeRun struct {
	name        string
	image       string // default imageRef
	annotations map[string]string
	devices     []*cri.Device
	uid         int64
	env         []*cri.KeyValue
	args        []string
	// line is the prefix of the output line to return.
	line string
}

// runContainer runs the probe in its own pod (host network, no added
// capabilities) until it exits, and returns the line it printed that starts
// with r.line and the container's id. The pod is removed when t ends.
func runContainer(ctx context.Context, t *testing.T, rt cri.RuntimeServiceClient, base string, r probeRun) (string, string) {
	t.Helper()
	image := r.image
	if image == "" {
		image = imageRef
	}
	logDir := filepath.Join(base, "logs", r.name)
	nsOpts := &cri.NamespaceOption{Network: cri.NamespaceMode_NODE, Pid: cri.NamespaceMode_CONTAINER, Ipc: cri.NamespaceMode_POD}
	sandboxCfg := &cri.PodSandboxConfig{
		Metadata:     &cri.PodSandboxMetadata{Name: r.name, Namespace: "memlock-test", Uid: "uid-" + r.name},
		Annotations:  r.annotations,
		LogDirectory: logDir,
		Linux: &cri.LinuxPodSandboxConfig{
			CgroupParent:    cgroupParent,
			SecurityContext: &cri.LinuxSandboxSecurityContext{NamespaceOptions: nsOpts},
		},
	}
	sb, err := rt.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: sandboxCfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := rt.StopPodSandbox(c, &cri.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId}); err != nil {
			t.Logf("StopPodSandbox: %v", err)
		}
		if _, err := rt.RemovePodSandbox(c, &cri.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId}); err != nil {
			t.Logf("RemovePodSandbox: %v", err)
		}
	})
	cc, err := rt.CreateContainer(ctx, &cri.CreateContainerRequest{
		PodSandboxId: sb.PodSandboxId,
		Config: &cri.ContainerConfig{
			Metadata: &cri.ContainerMetadata{Name: "probe"},
			Image:    &cri.ImageSpec{Image: image},
			Command:  []string{"/probe"},
			Args:     r.args,
			Envs:     r.env,
			LogPath:  "probe.log",
			Devices:  r.devices,
			Linux: &cri.LinuxContainerConfig{SecurityContext: &cri.LinuxContainerSecurityContext{
				RunAsUser:        &cri.Int64Value{Value: r.uid},
				RunAsGroup:       &cri.Int64Value{Value: r.uid},
				NamespaceOptions: nsOpts,
			}},
		},
		SandboxConfig: sandboxCfg,
	})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if _, err := rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: cc.ContainerId}); err != nil {
		t.Fatalf("StartContainer (the container must start even when memlock is clamped): %v", err)
	}
	var status *cri.ContainerStatus
	testenv.Eventually(t, 30*time.Second, "the probe to exit", func() error {
		st, err := rt.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: cc.ContainerId})
		if err != nil {
			return err
		}
		status = st.Status
		if status.State != cri.ContainerState_CONTAINER_EXITED {
			return fmt.Errorf("state %s", status.State)
		}
		return nil
	})
	logData, err := os.ReadFile(filepath.Join(logDir, "probe.log"))
	if err != nil {
		t.Fatalf("read container log: %v", err)
	}
	if status.ExitCode != 0 {
		t.Fatalf("probe exited %d: %s %s\n%s", status.ExitCode, status.Reason, status.Message, logData)
	}
	// CRI log lines: "<time> stdout F <text>".
	for _, line := range bytes.Split(logData, []byte("\n")) {
		if _, text, ok := strings.Cut(string(line), " stdout F "); ok && strings.HasPrefix(text, r.line) {
			return text, cc.ContainerId
		}
	}
	t.Fatalf("no %q line in the container log:\n%s", r.line, logData)
	return "", ""
}

func ptrTo[T any](v T) *T { return &v }

// hostileRef names a test image whose /etc/passwd is hostile.
func hostileRef(name string) string { return "docker.io/ibkube/memlock-hostile-" + name + ":test" }

type rankEvent struct {
	container string
	c         memlock.RankConf
}

// rankEvents records the plugin's rank conf events.
type rankEvents struct{ ch chan rankEvent }

func (e *rankEvents) MemlockEvent(nri.PodRef, string, memlock.Decision) {}
func (e *rankEvents) RankConfEvent(_ nri.PodRef, container string, c memlock.RankConf) {
	e.ch <- rankEvent{container, c}
}

func drainEvents(e *rankEvents) {
	for {
		select {
		case <-e.ch:
		default:
			return
		}
	}
}

func nextEvent(t *testing.T, e *rankEvents) rankEvent {
	t.Helper()
	select {
	case ev := <-e.ch:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no rank conf event")
		return rankEvent{}
	}
}

func fileDigest(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		return "absent: " + err.Error()
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}
