package nri

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/ibkube/ibkube/internal/testing/hostileimage"
	"github.com/ibkube/ibkube/node/imagefs"
)

// procStatusKiB reads a "VmRSS"-style line of /proc/self/status, in KiB.
func procStatusKiB(t *testing.T, key string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), key+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("/proc/self/status has no %s", key)
	return 0
}

// TestHostileCreatesThroughNRIKeepRSS: a thousand containers of a hostile
// image (four layers of a symlink back through a 256-deep directory chain
// under /etc/passwd) created through the runtime's NRI connection, the
// path containerd takes: each create is answered, no image read runs on
// once its answer has come back (every read stops at its deadline), and
// the process's resident memory stays within 10 % of what it was after
// the first creates. The fake runtime runs in this process too, so its
// memory counts as well.
func TestHostileCreatesThroughNRIKeepRSS(t *testing.T) {
	var inFlight atomic.Int32
	img := unionImage{imagefs.Union{Layers: hostileimage.Layers(t, 256, 4)}, &inFlight}
	sock := filepath.Join(t.TempDir(), "nri.sock")
	r := startRuntimeWith(t, sock, nil)
	const timeout = 4 * time.Millisecond
	p := runPlugin(t, Config{SocketPath: sock, RankConfDir: t.TempDir(), Image: img, PasswdTimeout: timeout}, nil, nil)
	waitState(t, p, StateConnected)
	waitServed(t, r)

	create := func(i int) {
		req := createRequest(nil, uverbs0)
		req.Container.Id = fmt.Sprint("hostile", i)
		req.Container.User = &api.User{Uid: 1000}
		start := time.Now()
		if _, err := r.CreateContainer(context.Background(), req); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		if n := inFlight.Load(); n != 0 {
			t.Fatalf("create %d answered after %s with %d image reads still running", i, time.Since(start), n)
		}
	}
	const warm, creates = 20, 1000
	for i := range warm {
		create(i)
	}
	idle := procStatusKiB(t, "VmRSS")
	start := time.Now()
	for i := range creates {
		create(warm + i)
	}
	took := time.Since(start)
	after := procStatusKiB(t, "VmRSS")
	t.Logf("%d hostile creates through NRI in %s (%s each, lookups bounded by %s): RSS %d KiB after the first %d, %d KiB after (%+.1f %%), peak %d KiB",
		creates, took.Round(time.Millisecond), (took / creates).Round(10*time.Microsecond), timeout, idle, warm, after, 100*float64(after-idle)/float64(idle), procStatusKiB(t, "VmHWM"))
	if after > idle*11/10 {
		t.Errorf("RSS %d KiB after %d hostile creates, %d KiB before: want within 10 %%", after, creates, idle)
	}
}
