//go:build integration

// Package dra runs the DRA driver's API side against a real kube-apiserver
// and etcd (envtest, Kubernetes 1.37.2 with its default feature gates): the
// start-up gate check's dry-run creates, and the ResourceSlices of real
// machines through the kubeletplugin slice controller, which the API
// server validates. The kubelet side (prepare, health) is the e2e's.
package dra

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/internal/testing/dratest"
	"github.com/ibkube/ibkube/internal/testing/testenv"
	"github.com/ibkube/ibkube/internal/testing/testrun"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/node/dra"
	"github.com/ibkube/ibkube/node/resource"
)

func TestDriverAgainstAPIServer(t *testing.T) {
	restCfg, _ := testenv.Start(t, "test-integration-dra")
	cs := testenv.Clientset(t, restCfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const node = "nd-0"
	testenv.CreateNode(ctx, t, cs, node)

	t.Run("gates", func(t *testing.T) {
		if err := dra.CheckGates(ctx, cs.ResourceV1().DeviceClasses(), cs.ResourceV1().ResourceSlices(), node, true); err != nil {
			t.Fatalf("gate check on Kubernetes 1.37.2 defaults: %v", err)
		}
		classes, _ := cs.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
		sl, _ := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if len(classes.Items)+len(sl.Items) != 0 {
			t.Errorf("the dry-run check stored %d DeviceClasses and %d ResourceSlices", len(classes.Items), len(sl.Items))
		}
	})

	// A broken HCA (port down) carries a taint, which the API server must
	// accept too.
	dir := fixture.BuildTemp(t, fixture.Broken)
	sysfs := fixture.SysfsRoot(dir)
	scanner := discovery.NewScanner(discovery.Options{SysfsRoot: sysfs, DevRoot: fixture.DevRoot(dir), PortPoll: -1})
	inv, err := scanner.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sockets := dratest.SocketDir(t, "dra")
	d, err := dra.New(dra.Config{
		NodeName: node, CDIDir: t.TempDir(),
		PCIeRoot: func(addr string) (string, error) { return dra.PCIeRoot(sysfs, addr) },
		Plugin:   dra.PluginOptions{Client: cs, PluginDir: filepath.Join(sockets, "p"), RegistryDir: filepath.Join(sockets, "r")},
	}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	d.Update(resource.Build(config.Default(), inv, resource.Options{HostDevRoot: "/dev"}))
	testrun.Start(ctx, t, "Run", d.Run)

	pool := dratest.Pool(ctx, t, cs, 30*time.Second, nil)
	got := pool.Devices
	if len(pool.CounterSets) == 0 {
		t.Errorf("stored no shared counters: %+v", pool.Slices)
	}
	for _, dev := range got {
		if len(dev.ConsumesCounters) != 1 {
			t.Errorf("device %s as stored consumes %+v, want its HCA's counter", dev.Name, dev.ConsumesCounters)
		}
	}
	want := dra.Resources(resource.Build(config.Default(), inv, resource.Options{HostDevRoot: "/dev"}), dra.NodeFacts{Name: node})
	n := 0
	for _, s := range want.Pools[node].Slices {
		n += len(s.Devices)
	}
	if len(got) != n {
		t.Fatalf("stored %d devices, want %d", len(got), n)
	}
	for _, dev := range got {
		if dev.Name == "shared-ib-mlx5-0" {
			if dev.AllowMultipleAllocations == nil || dev.Capacity[contract.DRACapacitySlots].RequestPolicy == nil {
				t.Errorf("shared device as stored: %+v; consumable capacity dropped", dev)
			}
		}
		if dev.Name == "ib-mlx5-1" { // port DOWN in the broken fixture
			if !slices.ContainsFunc(dev.Taints, func(tn resourceapi.DeviceTaint) bool {
				return tn.Key == contract.DRATaintUnhealthy && tn.TimeAdded != nil
			}) {
				t.Errorf("ib-mlx5-1 taints as stored: %+v, want %s stamped by the API server", dev.Taints, contract.DRATaintUnhealthy)
			}
		}
	}
}
