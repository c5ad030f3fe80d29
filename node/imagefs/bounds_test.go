package imagefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ibkube/ibkube/internal/testing/hostileimage"
)

// countdown is a context that ends after its Err has answered nil left
// times, and counts how often it is asked once ended: a lookup that
// consults its context at every step stops at the first ended answer.
type countdown struct {
	context.Context
	left  atomic.Int64
	ended atomic.Int64
}

func newCountdown(left int64) *countdown {
	c := &countdown{Context: context.Background()}
	c.left.Store(left)
	return c
}

func (c *countdown) Err() error {
	if c.left.Add(-1) >= 0 {
		return nil
	}
	c.ended.Add(1)
	return context.Canceled
}

// TestUnionDeadlineReachesEveryStep: whichever step of a lookup its
// context ends at (a directory entered, a layer probed, a symlink
// followed), the lookup returns the context's error and takes no step
// after it.
func TestUnionDeadlineReachesEveryStep(t *testing.T) {
	t.Parallel()
	passwd := "mpiuser:x:1000:1000::/home/mpiuser:/bin/sh\n"
	u := Union{Layers: []string{
		layer(t, map[string]string{"etc/": "", "usr/": ""}),
		layer(t, map[string]string{"etc/passwd@": "../usr/share/base/passwd", "usr/share/": ""}),
		layer(t, map[string]string{"usr/share/base@": "/lib/base", "lib/base/passwd": passwd}),
	}}
	full := newCountdown(1 << 30)
	if b, err := u.ReadFile(full, "/etc/passwd", 1<<10); err != nil || string(b) != passwd {
		t.Fatalf("ReadFile = %q, %v; want the passwd", b, err)
	}
	steps := int64(1<<30) - full.left.Load()
	if steps < 10 {
		t.Fatalf("the lookup consulted its context %d times; want every step", steps)
	}
	for n := range steps {
		ctx := newCountdown(n)
		_, err := u.ReadFile(ctx, "/etc/passwd", 1<<10)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("context ended after %d of %d steps: err = %v, want context.Canceled", n, steps, err)
		}
		if got := ctx.ended.Load(); got != 1 {
			t.Fatalf("context ended after %d of %d steps: asked %d times once ended; want the lookup to stop at once", n, steps, got)
		}
	}
}

// TestUnionHostileImageBounded: symlinks through deep directory chains in
// every layer cost a bounded number of steps, not layers x depth^2, and the
// lookup fails with a clear error.
func TestUnionHostileImageBounded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ depth, layers int }{{64, 1}, {1024, 1}, {2046, 1}, {256, 8}} {
		t.Run(fmt.Sprintf("depth=%d/layers=%d", tc.depth, tc.layers), func(t *testing.T) {
			t.Parallel()
			u := Union{Layers: hostileimage.Layers(t, tc.depth, tc.layers)}
			ctx := newCountdown(1 << 30)
			_, err := u.ReadFile(ctx, "/etc/passwd", 1<<10)
			if !errors.Is(err, ErrTooComplex) && !errors.Is(err, ErrLoop) {
				t.Fatalf("err = %v, want ErrTooComplex or ErrLoop", err)
			}
			if steps := int64(1<<30) - ctx.left.Load(); steps > MaxWalk+1 {
				t.Fatalf("the lookup took %d steps, over its bound of %d", steps, MaxWalk)
			}
		})
	}
}

// TestUnionReadFileHeap: reading a file within the bound allocates its own
// size once, not the doubling of a growing buffer.
func TestUnionReadFileHeap(t *testing.T) {
	content := strings.Repeat("user:x:1000:1000::/home/user:/bin/sh\n", 28000) // ~1 MiB
	u := Union{Layers: []string{layer(t, map[string]string{"etc/passwd": content})}}
	allocs := testing.AllocsPerRun(5, func() {
		if _, err := u.ReadFile(context.Background(), "/etc/passwd", 1<<20); err != nil {
			t.Fatal(err)
		}
	})
	var before, after runtimeMem
	before.read()
	if _, err := u.ReadFile(context.Background(), "/etc/passwd", 1<<20); err != nil {
		t.Fatal(err)
	}
	after.read()
	if got, limit := after.total-before.total, uint64(len(content))+64<<10; got > limit {
		t.Errorf("reading a %d-byte file allocated %d bytes (%.0f allocations); want under %d", len(content), got, allocs, limit)
	}
}

type runtimeMem struct{ total uint64 }

func (m *runtimeMem) read() {
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	m.total = s.TotalAlloc
}

// TestUnionHostileLookupsLeaveNothing: a thousand lookups of a hostile
// image, each stopped at its deadline or its bound wherever it was, leave
// no descriptor open and the heap where it was.
func TestUnionHostileLookupsLeaveNothing(t *testing.T) {
	u := Union{Layers: hostileimage.Layers(t, 256, 2)}
	fds := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	heap := func() uint64 {
		runtime.GC()
		var s runtime.MemStats
		runtime.ReadMemStats(&s)
		return s.HeapInuse
	}
	fdsBefore, heapBefore := fds(), heap()
	for i := range 1000 {
		// Stopped anywhere in its first 256 steps, or every 50th at the
		// bound.
		ctx := newCountdown(int64(i * 37 % 256))
		if i%50 == 0 {
			ctx = newCountdown(MaxWalk + 100)
		}
		if _, err := u.ReadFile(ctx, "/etc/passwd", 1<<20); err == nil {
			t.Fatal("a hostile image was read")
		}
	}
	if got := fds(); got != fdsBefore {
		t.Errorf("open descriptors: %d before, %d after 1,000 lookups", fdsBefore, got)
	}
	if got := heap(); got > heapBefore+1<<20 {
		t.Errorf("heap in use: %d before, %d after 1,000 lookups; want within 1 MiB", heapBefore, got)
	}
}
