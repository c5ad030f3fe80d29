package counters

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/ibkube/ibkube/internal/testing/kubeletstub"
)

// TestPodResourcesLister lists over a real gRPC server on a unix socket, as
// the agent talks to the kubelet.
func TestPodResourcesLister(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	kubeletstub.StartPodResources(t, sock, &podresourcesv1.PodResources{
		Namespace: "ml", Name: "train-0", Containers: []*podresourcesv1.ContainerResources{
			{Name: "trainer", Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "rdma/ib", DeviceIds: []string{"mlx5_0"}}}},
		},
	})

	l, err := NewPodResourcesLister(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	got, err := l.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []Container{{Namespace: "ml", Pod: "train-0", Container: "trainer", Devices: map[string][]string{"rdma/ib": {"mlx5_0"}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}

	missing, err := NewPodResourcesLister(filepath.Join(t.TempDir(), "none.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = missing.Close() })
	if _, err := missing.List(context.Background()); err == nil {
		t.Error("List on a socket nobody serves succeeded")
	}
}
