package server

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ibkube/ibkube/internal/testing/configmapdir"
)

// TestConfigStoreSignalsChanges: a reload that swaps the configuration
// wakes what acts on it outside admission (the aligned claim templates),
// and one that finds the same content, or a bad file, does not.
func TestConfigStoreSignalsChanges(t *testing.T) {
	t.Parallel()
	c := configmapdir.New(t.TempDir(), "webhook.yaml")
	c.Write(t, configYAML("rdma/a"))
	s, err := newConfigStore(c.Path(), nil, prometheus.NewRegistry(), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	pending := func() bool {
		select {
		case <-s.Changed():
			return true
		default:
			return false
		}
	}
	if _, err := s.reload(); err != nil || pending() {
		t.Fatalf("same content: err %v, signalled %t; want neither", err, pending())
	}
	c.Write(t, configYAML("rdma/b"))
	if _, err := s.reload(); err != nil || !pending() {
		t.Fatalf("new content: err %v; want a signal", err)
	}
	c.Write(t, badYAML)
	if _, err := s.reload(); err == nil || pending() {
		t.Fatalf("bad content: err %v; want an error and no signal", err)
	}
}
