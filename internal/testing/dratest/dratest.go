// Package dratest holds what the DRA driver's tests share, from its unit
// tests to the agent's integration test: a directory short enough for unix
// sockets, waiting for the node's ResourceSlices, and the reference driver
// the allocator benchmarks and the fleet set ibkube against. It does not import the
// driver, so the driver's own tests can use it. Only tests import it.
package dratest

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
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

// Pool waits until the API holds every ResourceSlice of one complete pool
// (as many as its resourceSliceCount, one generation) and returns them
// with their devices in slice-name order, failing the test after within. A
// value on stopped (nil: none watched) means the driver ended before it
// published, which fails the test at once.
func Pool(ctx context.Context, t testing.TB, cs kubernetes.Interface, within time.Duration, stopped <-chan error) Published {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		list, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if p, ok := complete(list); err == nil && ok {
			return p
		}
		select {
		case err := <-stopped:
			t.Fatalf("the driver stopped before it published its ResourceSlices: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no complete pool of ResourceSlices within %s (the API server may have refused one; see the log): %v, %v", within, list, err)
		}
	}
}

// Published is one pool as the API holds it.
type Published struct {
	Slices []resourceapi.ResourceSlice
	// Devices are every slice's devices, in slice-name order.
	Devices []resourceapi.Device
	// CounterSets are every slice's shared counter sets.
	CounterSets []resourceapi.CounterSet
}

func complete(list *resourceapi.ResourceSliceList) (Published, bool) {
	if list == nil || len(list.Items) == 0 {
		return Published{}, false
	}
	items := slices.Clone(list.Items)
	slices.SortFunc(items, func(a, b resourceapi.ResourceSlice) int { return strings.Compare(a.Name, b.Name) })
	first := items[0].Spec.Pool
	for _, s := range items {
		if s.Spec.Pool != first {
			return Published{}, false
		}
	}
	if int64(len(items)) != first.ResourceSliceCount {
		return Published{}, false
	}
	p := Published{Slices: items}
	for _, s := range items {
		p.Devices = append(p.Devices, s.Spec.Devices...)
		p.CounterSets = append(p.CounterSets, s.Spec.SharedCounters...)
	}
	return p, true
}

// GenerateNames makes the fake clientset name created objects from their
// generateName, as the API server does (the fake's tracker stores the name
// as given, so a second slice of one driver would collide on "").
func GenerateNames(cs *fake.Clientset) {
	var n atomic.Int64
	cs.PrependReactor("create", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
		obj := action.(k8stesting.CreateAction).GetObject()
		if m, err := meta.Accessor(obj); err == nil && m.GetName() == "" && m.GetGenerateName() != "" {
			m.SetName(m.GetGenerateName() + strconv.FormatInt(n.Add(1), 36))
		}
		return false, nil, nil
	})
}
