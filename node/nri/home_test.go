package nri

import (
	"context"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/ibkube/ibkube/internal/testing/hostileimage"
	"github.com/ibkube/ibkube/node/imagefs"
	"github.com/ibkube/ibkube/node/memlock"
)

// passwdImage is an image whose /etc/passwd holds the given text.
type passwdImage string

func (p passwdImage) ReadFile(_ context.Context, _, name string, _ int64) ([]byte, error) {
	if name != "/etc/passwd" {
		return nil, imagefs.ErrNotExist
	}
	return []byte(p), nil
}

// unionImage reads a real imagefs.Union and counts the reads in progress.
type unionImage struct {
	u        imagefs.Union
	inFlight *atomic.Int32
}

func (i unionImage) ReadFile(ctx context.Context, _, name string, max int64) ([]byte, error) {
	i.inFlight.Add(1)
	defer i.inFlight.Add(-1)
	return i.u.ReadFile(ctx, name, max)
}

// TestPasswdOfStopsAtDeadline: a lookup in a hostile image that outlasts
// its deadline has stopped when passwdOf returns; nothing of it runs on.
func TestPasswdOfStopsAtDeadline(t *testing.T) {
	t.Parallel()
	var inFlight atomic.Int32
	var layers []string
	for range 4 {
		layers = append(layers, hostileimage.Layers(t, 256, 1)[0])
	}
	img := unionImage{imagefs.Union{Layers: layers}, &inFlight}
	p, err := NewPlugin(Config{Image: img, PasswdTimeout: time.Millisecond}, testNode, testr.New(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		pw := p.passwdOf("c1", 1000)
		if n := inFlight.Load(); n != 0 {
			t.Fatalf("passwdOf returned with %d lookups still running", n)
		}
		if pw.Status != memlock.PasswdUnread || pw.Why == "" {
			t.Fatalf("passwdOf = %+v; want it unread, with why", pw)
		}
	}
}

// blockingImage holds every read until release is closed, and counts the
// reads it was asked for.
type blockingImage struct {
	entered chan struct{}
	release chan struct{}
	calls   *atomic.Int32
}

func (b blockingImage) ReadFile(context.Context, string, string, int64) ([]byte, error) {
	b.calls.Add(1)
	b.entered <- struct{}{}
	<-b.release
	return []byte("root:x:0:0:root:/root:/bin/sh\n"), nil
}

// TestImageReadsOneAtATime: while one container's read holds the image
// reader, another container's lookup waits for its turn and gives up at its
// own deadline, without a second read.
func TestImageReadsOneAtATime(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	img := blockingImage{make(chan struct{}, 2), make(chan struct{}), &calls}
	p, err := NewPlugin(Config{Image: img, PasswdTimeout: 50 * time.Millisecond}, testNode, testr.New(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan memlock.Passwd, 1)
	go func() { first <- p.passwdOf("first", 0) }()
	<-img.entered
	second := p.passwdOf("second", 0)
	if second.Status != memlock.PasswdUnread || !strings.Contains(second.Why, "waiting for another container's image read") {
		t.Errorf("second lookup while the first holds the reader: %+v; want unread, waiting", second)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the image was read %d times at once; want one at a time", n)
	}
	close(img.release)
	<-first
}

// TestHomeNotUTF8StartsTheContainer: a passwd home that is not valid
// UTF-8 mounts nothing there, and the adjustment the runtime gets can be
// sent (protobuf strings are UTF-8; a reply that cannot be marshalled
// fails the container's creation).
func TestHomeNotUTF8StartsTheContainer(t *testing.T) {
	t.Parallel()
	img := passwdImage("mpiuser:x:1000:1000::/home/\xffuser:/bin/sh\n")
	p, err := NewPlugin(Config{RankConfDir: t.TempDir(), Image: img}, testNode, testr.New(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pod := &api.PodSandbox{Id: "pod1", Name: "worker-0", Namespace: "hpc", Uid: "u1"}
	for _, env := range [][]string{{"NCCL_IB_HCA=mlx5_0"}, {"NCCL_IB_HCA=mlx5_0", "HOME=/home/mpiuser"}} {
		ctr := &api.Container{Id: "worker0", Name: "worker", Env: env, User: &api.User{Uid: 1000},
			Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{uverbs0}}}
		adj := p.createContainer(pod, ctr)
		if _, err := proto.Marshal(&api.CreateContainerResponse{Adjust: adj}); err != nil {
			t.Fatalf("env %q: the reply to the runtime cannot be sent: %v", env, err)
		}
		for _, m := range adj.GetMounts() {
			if strings.Contains(m.Destination, "\xff") {
				t.Errorf("env %q: mount at %q", env, m.Destination)
			}
		}
	}
}

// TestMountableTargets: a conf file is not mounted into one of the
// container's own mounts (a volume, the service-account token's read-only
// directory), nor at a path the runtime's API cannot carry.
func TestMountableTargets(t *testing.T) {
	t.Parallel()
	const token = "/var/run/secrets/kubernetes.io/serviceaccount"
	mounts := []string{"/proc", "/dev", token, "/data/", "/etc/hosts"}
	for _, tc := range []struct {
		name        string
		targets     []string
		want        []string
		wantOutcome memlock.RankOutcome
		wantWarn    bool
	}{
		{name: "a home outside every mount", targets: []string{"/home/mpiuser/.nccl.conf"}, want: []string{"/home/mpiuser/.nccl.conf"}, wantOutcome: memlock.RankWritten},
		{name: "a home in the token's directory", targets: []string{token + "/.nccl.conf"}, wantOutcome: memlock.RankNoHome, wantWarn: true},
		{name: "a home below a volume", targets: []string{"/data/users/a/.nccl.conf"}, wantOutcome: memlock.RankNoHome, wantWarn: true},
		{name: "a mount that only shares a prefix", targets: []string{"/database/.nccl.conf"}, want: []string{"/database/.nccl.conf"}, wantOutcome: memlock.RankWritten},
		{name: "one of two kept", targets: []string{"/root/.nccl.conf", "/data/.nccl.conf"}, want: []string{"/root/.nccl.conf"}, wantOutcome: memlock.RankWritten, wantWarn: true},
		{name: "not UTF-8", targets: []string{"/home/\xff/.nccl.conf"}, wantOutcome: memlock.RankNoHome, wantWarn: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := mountable(memlock.RankConf{Outcome: memlock.RankWritten, Targets: tc.targets, Reason: "written"}, mounts)
			if d := cmp.Diff(tc.want, got.Targets); d != "" || got.Outcome != tc.wantOutcome || got.Warn != tc.wantWarn {
				t.Errorf("mountable = %s, warn %v (%s), targets (-want +got):\n%s; want %s, warn %v", got.Outcome, got.Warn, got.Reason, d, tc.wantOutcome, tc.wantWarn)
			}
		})
	}
}

// TestHomeInTokenDirNotMounted: a passwd home in the service-account
// token's directory, which the kubelet mounts read-only, gets no conf file
// there (runc would fail the container's start creating it) and an Event.
func TestHomeInTokenDirNotMounted(t *testing.T) {
	t.Parallel()
	const token = "/var/run/secrets/kubernetes.io/serviceaccount"
	img := passwdImage("svc:x:1000:1000::" + token + ":/bin/sh\n")
	events := eventRecorder{make(chan recordedEvent, 10)}
	p, err := NewPlugin(Config{RankConfDir: t.TempDir(), Image: img}, testNode, testr.New(t), nil, events)
	if err != nil {
		t.Fatal(err)
	}
	pod := &api.PodSandbox{Id: "pod1", Name: "worker-0", Namespace: "hpc", Uid: "u1"}
	ctr := &api.Container{Id: "worker0", Name: "worker", Env: []string{"NCCL_IB_HCA=mlx5_0"}, User: &api.User{Uid: 1000},
		Linux:  &api.LinuxContainer{Devices: []*api.LinuxDevice{uverbs0}},
		Mounts: []*api.Mount{{Destination: token, Type: "bind", Source: "/var/lib/kubelet/pods/u1/volumes/token", Options: []string{"rbind", "ro"}}}}
	adj := p.createContainer(pod, ctr)
	for _, m := range adj.GetMounts() {
		if strings.HasPrefix(m.Destination, token+"/") {
			t.Errorf("conf file mounted at %s, inside the read-only token mount", m.Destination)
		}
	}
	select {
	case e := <-events.events:
		if e.Outcome != memlock.Outcome(memlock.RankNoHome) {
			t.Errorf("event outcome %s, want %s", e.Outcome, memlock.RankNoHome)
		}
	default:
		t.Error("no Event for a home the file cannot go to")
	}
}

// TestHostileCreatesLeaveNothing: a thousand creates of containers from a
// hostile image, each lookup stopped at its deadline, leave no goroutine,
// descriptor or heap behind.
func TestHostileCreatesLeaveNothing(t *testing.T) {
	var inFlight atomic.Int32
	img := unionImage{imagefs.Union{Layers: []string{hostileimage.Layers(t, 64, 1)[0]}}, &inFlight}
	p, err := NewPlugin(Config{Image: img, PasswdTimeout: time.Millisecond}, testNode, testr.New(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	count := func() (goroutines, fds int, heap uint64) {
		runtime.GC()
		var s runtime.MemStats
		runtime.ReadMemStats(&s)
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return runtime.NumGoroutine(), len(entries), s.HeapInuse
	}
	g0, f0, h0 := count()
	for range 1000 {
		p.passwdOf("c1", 1000)
	}
	g1, f1, h1 := count()
	if g1 > g0 || f1 != f0 || h1 > h0+1<<20 {
		t.Errorf("after 1,000 hostile lookups: goroutines %d -> %d, descriptors %d -> %d, heap in use %d -> %d; want none left and the heap within 1 MiB", g0, g1, f0, f1, h0, h1)
	}
}
