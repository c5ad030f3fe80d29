package server

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ibkube/ibkube/internal/testing/configmapdir"
	"github.com/ibkube/ibkube/internal/testing/errtest"
	"github.com/ibkube/ibkube/webhook/config"
)

func configYAML(shared string) string {
	return fmt.Sprintf("apiVersion: ibkube.io/v1alpha1\nkind: WebhookConfig\nresources:\n  shared: %s\n  exclusive: rdma/ib\n", shared)
}

const badYAML = "apiVersion: ibkube.io/v1alpha1\nkind: WebhookConfig\nresources:\n  shard: rdma/typo\n"

func gauge(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

func counter(t *testing.T, c *prometheus.CounterVec, label string) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.WithLabelValues(label).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func setRelease(c *config.Config) { c.ReleaseNamespace = "ibkube-system" }

// fileStore mounts content as the ConfigMap's file and opens a store on it,
// as the webhook starts with its ConfigMap mounted.
func fileStore(t *testing.T, content string, apply func(*config.Config), log logr.Logger) (*configStore, *configmapdir.Dir) {
	t.Helper()
	c := configmapdir.New(t.TempDir(), "webhook.yaml")
	c.Write(t, content)
	s, err := newConfigStore(c.Path(), apply, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func TestConfigStoreStart(t *testing.T) {
	t.Parallel()
	t.Run("missing file: defaults", func(t *testing.T) {
		s, err := newConfigStore(filepath.Join(t.TempDir(), "webhook.yaml"), setRelease, prometheus.NewRegistry(), logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		if got, want := s.Current().Resources, config.Default().Resources; got != want {
			t.Errorf("resources %+v, want defaults %+v", got, want)
		}
		if s.Current().ReleaseNamespace != "ibkube-system" {
			t.Errorf("release namespace not applied: %q", s.Current().ReleaseNamespace)
		}
	})
	t.Run("bad file at start is an error naming the file and field", func(t *testing.T) {
		c := configmapdir.New(t.TempDir(), "webhook.yaml")
		c.Write(t, badYAML)
		_, err := newConfigStore(c.Path(), nil, prometheus.NewRegistry(), logr.Discard())
		errtest.Names(t, err, c.Path(), "shard")
	})
}

// TestConfigStoreWatch swaps the file as a ConfigMap update does and checks
// that the watcher picks the new content up, keeps the last good config on a
// bad file (reporting it once), and recovers.
func TestConfigStoreWatch(t *testing.T) {
	t.Parallel()
	s, c := fileStore(t, configYAML("rdma/shared_a"), setRelease, logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, 0) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	shared := func() string { return s.Current().Resources.Shared }
	wantReloads := func(result string, want float64, when string) {
		t.Helper()
		if n := counter(t, s.reloads, result); n != want {
			t.Errorf("reloads with result %s = %v %s, want %v", result, n, when, want)
		}
	}

	<-s.watching
	c.Write(t, configYAML("rdma/shared_b"))
	waitFor(t, "rdma/shared_b", func() bool { return shared() == "rdma/shared_b" })
	if s.Current().ReleaseNamespace != "ibkube-system" {
		t.Errorf("release namespace lost on reload")
	}

	c.Write(t, badYAML)
	waitFor(t, "failure reported", func() bool { return gauge(t, s.lastOK) == 0 })
	if shared() != "rdma/shared_b" {
		t.Errorf("bad file replaced the config: shared = %q", shared())
	}
	if _, err := s.reload(); err == nil {
		t.Error("re-reading the bad file: no error")
	}
	wantReloads("failure", 1, "for one bad file")

	c.Write(t, configYAML("rdma/shared_c"))
	waitFor(t, "recovery", func() bool { return shared() == "rdma/shared_c" && gauge(t, s.lastOK) == 1 })
	wantReloads("success", 2, "after the recovery")

	// The file disappears: a failed reload, the last good config stays.
	c.Remove(t)
	waitFor(t, "disappearance reported", func() bool { return gauge(t, s.lastOK) == 0 })
	if shared() != "rdma/shared_c" {
		t.Errorf("a vanished file replaced the config: shared = %q, want the last good rdma/shared_c", shared())
	}
	if _, err := s.reload(); err == nil || !strings.Contains(err.Error(), "disappeared") {
		t.Errorf("re-reading the vanished file: err = %v, want one saying it disappeared", err)
	}
	wantReloads("failure", 2, "after the file vanished (one per event, not per re-read)")
	wantReloads("success", 2, "after the file vanished")

	c.Write(t, configYAML("rdma/shared_d"))
	waitFor(t, "recovery after the file came back", func() bool { return shared() == "rdma/shared_d" && gauge(t, s.lastOK) == 1 })
	wantReloads("success", 3, "after the file came back")
}

// TestConfigStoreStaysOnDefaults: a file missing at start and still missing is
// no failure: the defaults were chosen on purpose (no ConfigMap mounted).
func TestConfigStoreStaysOnDefaults(t *testing.T) {
	t.Parallel()
	s, err := newConfigStore(filepath.Join(t.TempDir(), "webhook.yaml"), nil, prometheus.NewRegistry(), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	changed, err := s.reload()
	if changed || err != nil {
		t.Errorf("reload of a still-missing file: changed %v, err %v; want no change, no error", changed, err)
	}
	if gauge(t, s.lastOK) != 1 || counter(t, s.reloads, "failure") != 0 {
		t.Error("a file missing since start counted as a failed reload")
	}
}

// TestConfigStoreVanishedFileLogsError: the disappearance is logged at error
// level, not as an informational switch to defaults.
func TestConfigStoreVanishedFileLogsError(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		logs []string
	)
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, args)
	}, funcr.Options{})
	s, c := fileStore(t, configYAML("rdma/shared_a"), nil, log)
	c.Remove(t)
	if _, err := s.reload(); err == nil {
		t.Fatal("reload of a vanished file: no error")
	}
	mu.Lock()
	defer mu.Unlock()
	found := false
	for _, l := range logs {
		if strings.Contains(l, `"error"=`) && strings.Contains(l, "disappeared") && strings.Contains(l, "keeping the last good one") {
			found = true
		}
		if strings.Contains(l, "defaults") {
			t.Errorf("log %s speaks of defaults", l)
		}
	}
	if !found {
		t.Errorf("no error-level log about the vanished file in %q", logs)
	}
}

// TestConfigStoreSignalsChanges: a reload that swaps the configuration
// wakes what acts on it outside admission (the aligned claim templates),
// and one that finds the same content, or a bad file, does not.
func TestConfigStoreSignalsChanges(t *testing.T) {
	t.Parallel()
	s, c := fileStore(t, configYAML("rdma/a"), nil, logr.Discard())
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
