package nri

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/node/memlock"
)

// TestRankConfAgainstNRIRuntime drives the plugin through the runtime side
// of NRI: a stale file from before a restart goes at Synchronize, a worker
// gets its file and a read-only bind mount at /root/.nccl.conf, a non-root
// container without HOME gets an event instead, and the file goes when the
// container stops.
func TestRankConfAgainstNRIRuntime(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nccl-ranks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const liveID, goneID = "live0123", "gone4567"
	for _, id := range []string{liveID, goneID} {
		if err := os.WriteFile(filepath.Join(dir, id+rankConfSuffix), []byte("NCCL_OLD=1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	unrelated := filepath.Join(dir, "README")
	if err := os.WriteFile(unrelated, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	sock := filepath.Join(t.TempDir(), "nri.sock")
	r := startRuntimeWith(t, sock, []*api.Container{{Id: liveID, State: api.ContainerState_CONTAINER_RUNNING}})
	reg := prometheus.NewRegistry()
	events := eventRecorder{make(chan recordedEvent, 10)}
	p := runPlugin(t, Config{SocketPath: sock, RankConfDir: dir, MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}, reg, events)
	waitState(t, p, StateConnected)
	waitServed(t, r)

	if _, err := os.Stat(filepath.Join(dir, goneID+rankConfSuffix)); !os.IsNotExist(err) {
		t.Errorf("file of a container the runtime no longer has: stat = %v, want it removed at Synchronize", err)
	}
	for _, f := range []string{filepath.Join(dir, liveID+rankConfSuffix), unrelated} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s: %v, want it kept", f, err)
		}
	}

	pod := &api.PodSandbox{Id: "pod1", Name: "worker-0", Namespace: "hpc", Uid: "u1",
		Annotations: map[string]string{contract.AnnotationNCCLConf: "NCCL_IB_PCI_RELAXED_ORDERING=1\nNCCL_IB_HCA=profile-loses\n"}}
	worker := &api.Container{Id: "worker0", PodSandboxId: "pod1", Name: "worker",
		Env:   []string{"NCCL_IB_HCA==mlx5_0:1", "NCCL_CONF_FILE=" + contract.NCCLConfFile},
		User:  &api.User{Uid: 0},
		Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{uverbs0}}}
	rpl, err := r.CreateContainer(context.Background(), &api.CreateContainerRequest{Pod: pod, Container: worker})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "worker0"+rankConfSuffix)
	wantMounts := []*api.Mount{{Destination: "/root/.nccl.conf", Source: file, Type: "bind", Options: []string{"rbind", "ro", "rprivate"}}}
	var gotMounts []*api.Mount
	for _, m := range rpl.GetAdjust().GetMounts() {
		gotMounts = append(gotMounts, &api.Mount{Destination: m.Destination, Source: m.Source, Type: m.Type, Options: m.Options})
	}
	if d := cmp.Diff(wantMounts, gotMounts, cmp.Comparer(func(a, b *api.Mount) bool {
		return a.Destination == b.Destination && a.Source == b.Source && a.Type == b.Type && cmp.Equal(a.Options, b.Options)
	})); d != "" {
		t.Errorf("mounts added (-want +got):\n%s", d)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range memlock.ParseNCCLConf(string(b)) {
		got[kv[0]] = kv[1]
	}
	if d := cmp.Diff(map[string]string{"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_IB_PCI_RELAXED_ORDERING": "1"}, got); d != "" {
		t.Errorf("file as NCCL reads it (-want +got):\n%s", d)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("file mode = %v, %v; want 0644 so any container uid reads it", fi.Mode().Perm(), err)
	}

	nonRoot := &api.Container{Id: "worker1", PodSandboxId: "pod1", Name: "sidecar", Env: []string{"NCCL_IB_HCA==mlx5_0:1"},
		User: &api.User{Uid: 1000}, Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{uverbs0}}}
	rpl, err = r.CreateContainer(context.Background(), &api.CreateContainerRequest{Pod: pod, Container: nonRoot})
	if err != nil {
		t.Fatal(err)
	}
	if m := rpl.GetAdjust().GetMounts(); len(m) != 0 {
		t.Errorf("non-root container without HOME got mounts %v", m)
	}
	select {
	case e := <-events.events:
		if d := cmp.Diff(recordedEvent{PodRef{"hpc", "worker-0", "u1"}, "sidecar", memlock.Outcome(memlock.RankNoHome)}, e); d != "" {
			t.Errorf("event (-want +got):\n%s", d)
		}
	case <-time.After(5 * time.Second):
		t.Error("no event for a container whose home is unknown")
	}
	if got := testutil.ToFloat64(p.metrics.rankConfs.WithLabelValues(string(memlock.RankWritten))); got != 1 {
		t.Errorf(`ibkube_nccl_rank_conf_total{outcome="written"} = %v, want 1`, got)
	}

	if _, err := r.StopContainer(context.Background(), &api.StopContainerRequest{Pod: pod, Container: worker}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("after StopContainer: stat = %v, want the file removed", err)
	}
	if err := r.RemoveContainer(context.Background(), &api.RemoveContainerRequest{Pod: pod, Container: &api.Container{Id: liveID}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, liveID+rankConfSuffix)); !os.IsNotExist(err) {
		t.Errorf("after RemoveContainer: stat = %v, want the file removed", err)
	}
}
