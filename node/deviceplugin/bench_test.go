package deviceplugin

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/ibkube/ibkube/internal/testing/kubeletstub"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/node/resource"
)

// BenchmarkAllocate is the kubelet's view of Allocate: one gRPC call over
// the plugin's unix socket, for four exclusive HCAs and for a shared slot
// (all eight HCAs' devices).
func BenchmarkAllocate(b *testing.B) {
	dir := b.TempDir()
	stub := kubeletstub.Start(b, dir)
	m := NewManager(Options{SocketDir: dir, Logger: logr.Discard()},
		specs(resource.Build(config.Default(), testNode(), resource.Options{HostDevRoot: "/dev"})))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for _, tc := range []struct {
		resource, name string
		ids            []string
	}{
		{"rdma/ib", "exclusive-4", []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}},
		{"rdma/shared_ib", "shared", []string{"slot-0"}},
	} {
		if _, err := stub.WaitRegistration(tc.resource, 5*time.Second); err != nil {
			b.Fatal(err)
		}
		c, err := stub.Client(tc.resource)
		if err != nil {
			b.Fatal(err)
		}
		req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: tc.ids}}}
		b.Run(tc.name, func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				t0 := time.Now()
				if _, err := c.Allocate(ctx, req); err != nil {
					b.Fatal(err)
				}
				total += time.Since(t0)
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N), "us/allocate")
		})
	}
}
