//go:build integration

package memlock

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the repository's top directory (this file is three levels down).
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test source")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// tool returns the path of a binary, from env (a file or a directory holding
// it) or def, and fails with the make target that provides it.
func tool(t *testing.T, env, name, def, target string) string {
	t.Helper()
	p := def
	if v := os.Getenv(env); v != "" {
		p = v
		if st, err := os.Stat(v); err == nil && st.IsDir() {
			p = filepath.Join(v, name)
		}
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not found at %s (set %s or run `make %s`)", name, p, env, target)
	}
	return p
}

// buildProbe builds the static probe program.
func buildProbe(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "probe")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./probe")
	cmd.Dir = filepath.Join(repoRoot(t), "test", "integration", "memlock")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, b)
	}
	return out
}

// entry is a file of a test image's layer beyond the probe: a regular file
// of data (after size bytes of passwd filler lines when size > 0), or a
// symlink to link.
type entry struct {
	name string
	data string
	size int64
	link string
}

// writeImage writes a docker-archive tarball (what `ctr images import`
// reads) of a one-layer image holding the probe at /probe and extra, whose
// default command is "/probe pause" so the same image serves as the pod
// sandbox. The layer is streamed through a file, so that an entry of
// 100 MB costs no memory.
func writeImage(t *testing.T, probe, out, ref string, extra ...entry) {
	t.Helper()
	bin, err := os.ReadFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	layerPath := out + ".layer"
	lf, err := os.Create(layerPath)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(layerPath)
	h := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(lf, h))
	for _, d := range []string{"dev/", "proc/", "sys/", "etc/", "tmp/", "home/"} {
		tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755})
	}
	tw.WriteHeader(&tar.Header{Name: "probe", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))})
	tw.Write(bin)
	for _, e := range extra {
		switch {
		case e.link != "":
			tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeSymlink, Linkname: e.link, Mode: 0o777})
		case e.size > 0:
			tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: e.size + int64(len(e.data))})
			if _, err := io.CopyN(tw, fillerLines{}, e.size); err != nil {
				t.Fatal(err)
			}
			tw.Write([]byte(e.data))
		default:
			tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.data))})
			tw.Write([]byte(e.data))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	size, err := lf.Seek(0, io.SeekCurrent)
	if err != nil {
		t.Fatal(err)
	}
	diffID := fmt.Sprintf("sha256:%x", h.Sum(nil))
	config, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{"/probe"}, "Cmd": []string{"pause"}, "WorkingDir": "/"},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
	manifest, _ := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": []string{ref}, "Layers": []string{"layer.tar"}}})

	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	aw := tar.NewWriter(f)
	if err := aw.WriteHeader(&tar.Header{Name: "layer.tar", Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
		t.Fatal(err)
	}
	if _, err := lf.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(aw, lf); err != nil {
		t.Fatal(err)
	}
	lf.Close()
	for _, e := range []struct {
		name string
		data []byte
	}{{"config.json", config}, {"manifest.json", manifest}} {
		if err := aw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.data))}); err != nil {
			t.Fatal(err)
		}
		aw.Write(e.data)
	}
	if err := aw.Close(); err != nil {
		t.Fatal(err)
	}
}

// fillerLines reads as an endless run of 64-byte passwd lines of uid 65534.
type fillerLines struct{}

const fillerLine = "nobody:x:65534:65534:filler:/nonexistent:/usr/sbin/nologin.....\n"

func (fillerLines) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = fillerLine[i%len(fillerLine)]
	}
	return len(p), nil
}

// containerdConfig renders a containerd 2.x config whose every path is
// under base, so the test never touches the host's containerd.
func containerdConfig(base, runc, sandboxImage string) string {
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = %[5]q
  plugin_path = %[6]q
  plugin_config_path = %[6]q

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "native"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[7]q

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    conf_dir = %[8]q
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    snapshotter = "native"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      BinaryName = %[9]q
      Root = %[10]q
`,
		filepath.Join(base, "root"), filepath.Join(base, "state"),
		filepath.Join(base, "containerd.sock"), filepath.Join(base, "containerd.sock.ttrpc"),
		filepath.Join(base, "nri.sock"), filepath.Join(base, "nri-plugins"),
		sandboxImage, filepath.Join(base, "cni"), runc, filepath.Join(base, "state", "runc"))
}

// teardown undoes what containerd and runc left under base, whatever state
// the test stopped in: containers runc still knows, shims serving our
// containerd (found by the address on their command line), mounts under
// base, and the test's cgroups.
func teardown(t *testing.T, base, runc, cgroupParent string, created []string) {
	runcRoots, _ := filepath.Glob(filepath.Join(base, "state", "runc", "*"))
	for _, root := range runcRoots {
		out, _ := exec.Command(runc, "--root", root, "list", "-q").Output()
		for _, id := range strings.Fields(string(out)) {
			if b, err := exec.Command(runc, "--root", root, "delete", "--force", id).CombinedOutput(); err != nil {
				t.Logf("teardown: runc delete %s: %v %s", id, err, b)
			}
		}
	}
	addr := filepath.Join(base, "containerd.sock")
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte("containerd-shim")) || !bytes.Contains(b, []byte(addr)) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			t.Logf("teardown: killing leftover shim pid %d", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	var mounts []string
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fields := strings.Fields(sc.Text()); len(fields) > 4 && strings.HasPrefix(fields[4], base) {
				mounts = append(mounts, fields[4])
			}
		}
		f.Close()
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			t.Logf("teardown: unmount %s: %v", m, err)
		}
	}
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", strings.TrimPrefix(cgroupParent, "/")))
	if d := filepath.Join("/sys/fs/cgroup", strings.TrimPrefix(cgroupParent, "/")); dirExists(d) {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		removeCgroup(d)
	}
	// Directories the shims created outside base (their sockets live in
	// /run/containerd/s), removed only when they did not exist before and
	// are empty again.
	for _, d := range created {
		os.Remove(d)
	}
}

// missingDirs returns those of dirs that do not exist, deepest first.
func missingDirs(dirs ...string) []string {
	var out []string
	for _, d := range dirs {
		if !dirExists(d) {
			out = append(out, d)
		}
	}
	return out
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// removeCgroup removes a cgroup directory tree, leaves first (cgroupfs only
// allows rmdir of empty groups; their control files go with them).
func removeCgroup(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeCgroup(filepath.Join(dir, e.Name()))
		}
	}
	syscall.Rmdir(dir)
}

// daemon is a process the test started and must end.
type daemon struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    *os.File
}

// startDaemon starts argv with its output appended to logPath and env
// added to the test's environment.
func startDaemon(t *testing.T, logPath, env string, argv ...string) *daemon {
	t.Helper()
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, exited: make(chan struct{}), log: log}
	go func() { cmd.Wait(); close(d.exited) }()
	return d
}

// stop ends the daemon (SIGTERM, then SIGKILL after 10 s), by its pid.
func (d *daemon) stop() {
	select {
	case <-d.exited:
	default:
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(10 * time.Second):
			d.cmd.Process.Kill()
			<-d.exited
		}
	}
	d.log.Close()
}

// ctxT is a context bound to the test's deadline, if any.
func ctxT(t *testing.T) (context.Context, context.CancelFunc) {
	if d, ok := t.Deadline(); ok {
		return context.WithDeadline(context.Background(), d.Add(-5*time.Second))
	}
	return context.WithCancel(context.Background())
}
