package dra

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/node/agent"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/node/resource"
)

// recordingServer is the driver as the agent's kubelet server, publishing
// to a recorder instead of a kubelet plugin helper.
type recordingServer struct {
	d   *Driver
	pub Publisher
}

func (s recordingServer) Update(m *resource.Model) { s.d.Update(m) }

func (s recordingServer) Run(ctx context.Context) error {
	s.d.attach(s.pub)
	<-ctx.Done()
	return nil
}

// runAgent runs the node agent on h's fixture with the driver as its
// kubelet server, discovering as on a host: sysfs attributes give no
// inotify events there, so port changes come from discovery's port poll.
func runAgent(t testing.TB, h *host) (*recordingPublisher, func()) {
	t.Helper()
	d, err := New(Config{NodeName: "node-0", CDIDir: t.TempDir(), RecoverHold: testRecoverHold, MinPublishInterval: testMinPublishInterval}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	pub := newRecordingPublisher()
	a, err := agent.New(agent.Config{
		Agent:     config.Default(),
		Scanner:   discovery.NewScanner(discovery.Options{SysfsRoot: fixture.SysfsRoot(h.dir), DevRoot: fixture.DevRoot(h.dir)}),
		SysfsRoot: fixture.SysfsRoot(h.dir), StateDir: t.TempDir(),
	}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	a.Serve(recordingServer{d: d, pub: pub})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	return pub, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}
}

// waitTainted waits for a publication whose tainted devices are want.
func waitTainted(t testing.TB, pub *recordingPublisher, want []string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case r := <-pub.ch:
			if slices.Equal(tainted(r), want) {
				return
			}
		case <-deadline:
			t.Fatalf("no ResourceSlice update with tainted devices %v", want)
		}
	}
}

// TestAgentRepublishesOnPortChange: in DRA mode the agent's own rescans
// (here discovery's port poll) reach the ResourceSlice.
func TestAgentRepublishesOnPortChange(t *testing.T) {
	t.Parallel()
	h := newHost(t, fixture.NDv5, nil)
	pub, stop := runAgent(t, h)
	defer stop()
	waitTainted(t, pub, nil)
	if err := fixture.SetPortState(h.dir, "mlx5_3", 1, "DOWN"); err != nil {
		t.Fatal(err)
	}
	waitTainted(t, pub, []string{"shared-ib-mlx5-3", "ib-mlx5-3"})
	if err := fixture.SetPortState(h.dir, "mlx5_3", 1, "ACTIVE"); err != nil {
		t.Fatal(err)
	}
	waitTainted(t, pub, nil)
}
