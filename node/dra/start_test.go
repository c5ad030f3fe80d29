package dra

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/dratest"
)

// TestRunServesKubelet runs the driver as the agent does, against a fake API
// server and talking to it over its gRPC socket as the kubelet does: the
// ResourceSlice appears in the API, NodePrepareResources fetches the claim
// and writes its CDI spec, the health stream reports every device, and
// NodeUnprepareResources removes the spec.
func TestRunServesKubelet(t *testing.T) {
	t.Parallel()
	c := gpuNIC()
	d := runDriver(t, "", c)
	ctx := context.Background()

	pool := dratest.Pool(ctx, t, d.client, 20*time.Second, nil)
	for _, slice := range pool.Slices {
		if slice.Spec.Driver != contract.DRADriverName || slice.Spec.Pool.Name != "node-0" || slice.Spec.NodeName == nil || *slice.Spec.NodeName != "node-0" {
			t.Errorf("slice %s: driver %s, pool %s, node %v; want %s, node-0, node-0", slice.Name, slice.Spec.Driver, slice.Spec.Pool.Name, slice.Spec.NodeName, contract.DRADriverName)
		}
	}
	if len(pool.Devices) != 16 || len(pool.CounterSets) != 1 || len(pool.CounterSets[0].Counters) != 8 {
		t.Errorf("pool: %d devices, %d counter sets %v; want 16 and one set of 8 counters (one per HCA)", len(pool.Devices), len(pool.CounterSets), pool.CounterSets)
	}

	conn := dial(t, filepath.Join(d.pluginDir, "dra.sock"))
	dra := drapbv1.NewDRAPluginClient(conn)
	ref := []*drapbv1.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}}
	resp, err := dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: ref})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Claims[string(c.UID)]
	if got == nil || got.Error != "" || len(got.Devices) != 3 {
		t.Fatalf("prepare: %v", resp)
	}
	if want := []string{CDIDeviceID(c.UID, "nics")}; !slices.Equal(got.Devices[0].CdiDeviceIds, want) {
		t.Errorf("CDI IDs of %s = %v, want %v", got.Devices[0].DeviceName, got.Devices[0].CdiDeviceIds, want)
	}
	spec := specStore{dir: d.cdi}.path(c.UID)
	if _, err := os.Stat(spec); err != nil {
		t.Errorf("no CDI spec after prepare: %v", err)
	}

	stream, err := drahealthv1.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	health, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var healthy []string
	for _, dh := range health.Devices {
		if dh.Health == drahealthv1.HealthStatus_HEALTHY {
			healthy = append(healthy, dh.Device.DeviceName)
		}
	}
	if len(healthy) != 16 {
		t.Errorf("health stream: %d healthy devices (%v), want 16", len(healthy), healthy)
	}

	// The claim is gone from the API by the time the pod is; unprepare
	// needs only its UID.
	if err := d.client.ResourceV1().ResourceClaims(c.Namespace).Delete(ctx, c.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	un, err := dra.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: ref})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("", un.Claims[string(c.UID)].GetError()); diff != "" {
		t.Errorf("unprepare error: %s", diff)
	}
	if _, err := os.Stat(spec); !os.IsNotExist(err) {
		t.Errorf("CDI spec left after unprepare: %v", err)
	}
}

func dial(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
