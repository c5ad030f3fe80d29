package certs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ibkube/ibkube/internal/atomicfile"
)

// File names in the cert dir and keys in the Secret (the same, as
// controller-runtime's webhook server and cert-controller both use them).
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
)

// fileSync copies tls.crt and tls.key from the certificate Secret into the
// cert dir whenever they differ. It runs on every replica (the cert-controller
// rotator writes the Secret; each replica needs the files locally, on an
// emptyDir, so the root filesystem stays read-only and no Secret volume with
// its kubelet sync delay is involved).
type fileSync struct {
	reader client.Reader
	key    types.NamespacedName
	dir    string
	period time.Duration
	log    logr.Logger
}

// NeedLeaderElection is false: every replica serves, so every replica needs
// the files.
func (f *fileSync) NeedLeaderElection() bool { return false }

// Start syncs at once and then every period until ctx ends. Errors are
// logged and retried: the Secret is empty until a rotator fills it.
func (f *fileSync) Start(ctx context.Context) error {
	t := time.NewTicker(f.period)
	defer t.Stop()
	for {
		if changed, err := f.sync(ctx); err != nil {
			f.log.Error(err, "sync serving certificate to files", "secret", f.key.String(), "dir", f.dir)
		} else if changed {
			f.log.Info("serving certificate written", "secret", f.key.String(), "dir", f.dir)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// errNotYet means the Secret has no serving certificate yet.
var errNotYet = errors.New("secret holds no tls.crt/tls.key yet")

// sync writes the Secret's certificate and key into the dir when they
// differ from the files there, and says whether it wrote.
func (f *fileSync) sync(ctx context.Context) (bool, error) {
	var s corev1.Secret
	if err := f.reader.Get(ctx, f.key, &s); err != nil {
		return false, fmt.Errorf("get secret %s: %w", f.key, err)
	}
	crt, key := s.Data[CertFile], s.Data[KeyFile]
	if len(crt) == 0 || len(key) == 0 {
		return false, errNotYet
	}
	return writeKeyPair(f.dir, crt, key)
}

// writeKeyPair makes dir/tls.crt and dir/tls.key hold crt and key. Each file
// is replaced by rename, key first, so a reader never sees a half-written
// file; a watcher that reads between the two renames sees a mismatched pair
// and retries on the second event.
func writeKeyPair(dir string, crt, key []byte) (bool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("create cert dir: %w", err)
	}
	changed := false
	for _, file := range [...]struct {
		name string
		data []byte
	}{{KeyFile, key}, {CertFile, crt}} {
		path := filepath.Join(dir, file.name)
		old, err := os.ReadFile(path)
		if err == nil && bytes.Equal(old, file.data) {
			continue
		}
		if err := writeAtomic(path, file.data); err != nil {
			return changed, err
		}
		changed = true
	}
	return changed, nil
}

func writeAtomic(path string, data []byte) error {
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
