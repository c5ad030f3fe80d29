// Package dratest holds what the DRA driver's tests share, from its unit
// tests to the agent's integration test: a directory short enough for unix
// sockets, and waiting for the node's ResourceSlice. It does not import the
// driver, so the driver's own tests can use it. Only tests import it.
package dratest

import (
	"context"
	"os"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// SocketDir makes a directory for the kubelet's plugin and registry sockets,
// removed when the test ends. Unix socket paths are limited to 108 bytes,
// which t.TempDir's paths, carrying the test's name, may pass.
func SocketDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// OneSlice waits until the API holds exactly one ResourceSlice and returns
// it, failing the test after within. A value on stopped (nil: none watched)
// means the driver ended before it published, which fails the test at once.
func OneSlice(ctx context.Context, t testing.TB, cs kubernetes.Interface, within time.Duration, stopped <-chan error) resourceapi.ResourceSlice {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		list, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err == nil && len(list.Items) == 1 {
			return list.Items[0]
		}
		select {
		case err := <-stopped:
			t.Fatalf("the driver stopped before it published a ResourceSlice: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no single ResourceSlice within %s (the API server may have refused it; see the log): %v, %v", within, list, err)
		}
	}
}
