// Package testrun runs a component's blocking Run (a server, a manager, a
// driver) in the background of a test: it stops when the test ends and
// its error fails the test. Only tests import it.
package testrun

import (
	"context"
	"testing"
	"time"
)

// Run is a run in the background.
type Run struct {
	name string
	done chan struct{}
	err  error
}

// Start runs run with a context derived from ctx until the test ends; then
// it cancels that context, waits for run to return, and fails the test
// with its error, named by name.
func Start(ctx context.Context, t testing.TB, name string, run func(context.Context) error) *Run {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	r := &Run{name: name, done: make(chan struct{})}
	go func() {
		r.err = run(ctx)
		close(r.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
		if r.err != nil {
			t.Errorf("%s: %v", name, r.err)
		}
	})
	return r
}

// WaitFor waits until ready is closed, failing the test when the run stops
// first or within passes; what says what ready means.
func (r *Run) WaitFor(t testing.TB, ready <-chan struct{}, within time.Duration, what string) {
	t.Helper()
	select {
	case <-ready:
	case <-r.done:
		t.Fatalf("%s returned before %s: %v", r.name, what, r.err)
	case <-time.After(within):
		t.Fatalf("%s: not within %s", what, within)
	}
}
