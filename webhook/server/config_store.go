package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ibkube/ibkube/internal/promreg"
	"github.com/ibkube/ibkube/webhook/config"
)

// configStore holds the current webhook configuration and re-reads its file
// when it changes. A Kubernetes ConfigMap volume updates a file by swapping a
// "..data" symlink in the file's directory, so the store watches the directory,
// not the file, and re-reads on any event there (plus a slow poll as a safety
// net). A file that fails to parse keeps the last good configuration; the error
// is logged and counted. A file missing at start means the built-in defaults;
// a file that disappears later is a failed reload, like a bad one: switching a
// running webhook to defaults would silently change what every new pod gets
// (resource names, profiles, memlock), so the last good configuration stays.
type configStore struct {
	path  string
	log   logr.Logger
	apply func(*config.Config) // adjusts every loaded config (e.g. the release namespace)

	cur atomic.Pointer[config.Config]

	mu       sync.Mutex // serialises reloads
	lastData []byte     // content in use (nil: defaults)
	missing  bool
	lastBad  []byte // last content that failed to parse
	goneBad  bool   // the file's disappearance has been reported

	reloads *prometheus.CounterVec
	lastOK  prometheus.Gauge

	watching chan struct{} // closed once Run watches the directory (tests wait on it)
	// changed receives (without blocking, at most one pending) when a
	// reload swaps the configuration, for what acts on it outside
	// admission (the aligned claim templates).
	changed chan struct{}
}

func newConfigStore(path string, apply func(*config.Config), reg prometheus.Registerer, log logr.Logger) (*configStore, error) {
	s := &configStore{
		path:     path,
		log:      log,
		apply:    apply,
		watching: make(chan struct{}),
		changed:  make(chan struct{}, 1),
		reloads:  promreg.CounterVec("ibkube_webhook_config_reloads_total", "Re-reads of the webhook config file that changed it, by result (success, failure: the last good config stays).", "result"),
		lastOK:   promreg.Gauge("ibkube_webhook_config_last_reload_successful", "1 if the config file in use parsed on its last read, 0 if a bad file was ignored and the last good config is still in use."),
	}
	if reg != nil {
		if err := promreg.Register(reg, s.reloads, s.lastOK); err != nil {
			return nil, fmt.Errorf("register config metrics: %w", err)
		}
	}
	cfg, data, missing, err := s.read()
	if err != nil {
		return nil, err
	}
	s.cur.Store(cfg)
	s.lastData, s.missing = data, missing
	s.lastOK.Set(1)
	return s, nil
}

// Changed receives when a reload swapped the configuration.
func (s *configStore) Changed() <-chan struct{} { return s.changed }

// Current returns the configuration in use. Callers must not modify it.
func (s *configStore) Current() *config.Config { return s.cur.Load() }

// read loads and parses the file; a missing file yields the defaults. data is
// returned even when parsing fails, so a bad file is reported once.
func (s *configStore) read() (cfg *config.Config, data []byte, missing bool, err error) {
	data, err = os.ReadFile(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		cfg, missing = config.Default(), true
	case err != nil:
		return nil, nil, false, fmt.Errorf("read webhook config %s: %w", s.path, err)
	default:
		cfg, err = config.Parse(data)
		if err != nil {
			return nil, data, false, fmt.Errorf("webhook config %s: %w", s.path, err)
		}
	}
	if s.apply != nil {
		s.apply(cfg)
	}
	return cfg, data, missing, nil
}

// reload re-reads the file and swaps the configuration if the file changed and
// parses. It reports whether the configuration changed. The same bad content
// is logged and counted once, however often it is re-read.
func (s *configStore) reload() (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cfg, data, missing, err := s.read()
	gone := err == nil && missing && !s.missing
	if gone {
		err = fmt.Errorf("webhook config %s disappeared: %w", s.path, fs.ErrNotExist)
	}
	if err != nil {
		if (gone && s.goneBad) || (data != nil && bytes.Equal(data, s.lastBad)) {
			return false, err
		}
		s.lastBad, s.goneBad = data, gone
		s.reloads.WithLabelValues("failure").Inc()
		s.lastOK.Set(0)
		s.log.Error(err, "webhook config not reloaded, keeping the last good one")
		return false, err
	}
	s.lastBad, s.goneBad = nil, false
	s.lastOK.Set(1)
	if missing == s.missing && bytes.Equal(data, s.lastData) {
		return false, nil
	}
	s.cur.Store(cfg)
	s.lastData, s.missing = data, missing
	s.reloads.WithLabelValues("success").Inc()
	s.log.Info("webhook config reloaded", "path", s.path)
	select {
	case s.changed <- struct{}{}:
	default:
	}
	return true, nil
}

// Run watches the file's directory until ctx ends. poll > 0 also re-reads on
// that interval in case an event is missed (e.g. the directory was recreated).
func (s *configStore) Run(ctx context.Context, poll time.Duration) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch webhook config: %w", err)
	}
	defer w.Close()
	dir := filepath.Dir(s.path)
	if err := w.Add(dir); err != nil {
		// The directory may not exist (no ConfigMap mounted): poll only.
		s.log.Info("cannot watch the config directory, polling only", "dir", dir, "err", err.Error())
	}
	close(s.watching)
	var tick <-chan time.Time
	if poll > 0 {
		t := time.NewTicker(poll)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			s.log.V(1).Info("config directory event", "event", ev.String())
			_, _ = s.reload() // errors are logged and counted in reload
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.log.Error(err, "config watch")
		case <-tick:
			_, _ = s.reload()
		}
	}
}
