// Command image writes a single-layer container image tarball (docker-archive
// format, importable with `ctr -n k8s.io images import`) from static binaries,
// without a Docker engine or a registry.
//
//	image -o out.tar -t ibkube:dev [-user 65532] [-entrypoint /usr/local/bin/x] FILE[=PATH_IN_IMAGE]...
//
// A FILE without =PATH lands in /usr/local/bin/<basename>, mode 0755.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

type file struct{ src, dst string }

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	out := fs.String("o", "", "output tarball")
	tag := fs.String("t", "", "image reference, e.g. ibkube:dev")
	user := fs.String("user", "65532:65532", "default user")
	entrypoint := fs.String("entrypoint", "", "entrypoint (default: none; pods set command)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *tag == "" || fs.NArg() == 0 {
		return errors.New("usage: image -o OUT -t REF FILE[=PATH]...")
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		return fmt.Errorf("parse tag %q: %w", *tag, err)
	}
	var files []file
	for _, a := range fs.Args() {
		src, dst, ok := strings.Cut(a, "=")
		if !ok {
			dst = "/usr/local/bin/" + filepath.Base(src)
		}
		files = append(files, file{src: src, dst: dst})
	}
	layerTar, err := buildLayer(files)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	cfg := v1.Config{
		User:       *user,
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		WorkingDir: "/",
	}
	if *entrypoint != "" {
		cfg.Entrypoint = []string{*entrypoint}
	}
	base, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		Created:      v1.Time{Time: time.Unix(0, 0).UTC()},
		Config:       cfg,
		RootFS:       v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return fmt.Errorf("append layer: %w", err)
	}
	tmp := *out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	return os.Rename(tmp, *out)
}

// accounts are the /etc/passwd and /etc/group every image gets unless a FILE
// supplies its own: root and the default user 65532. Programs that look a
// user up in the password database need them; NCCL up to 2.29, for one,
// finds ~/.nccl.conf through getpwuid(getuid())->pw_dir (NVIDIA/nccl
// src/misc/param.cc userHomeDir; from 2.30.3 it reads $HOME, commit
// b3aeda4a), and sshd sets HOME from the entry, so without one a process
// has no home.
var accounts = map[string]string{
	"etc/passwd": "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
	"etc/group":  "root:x:0:\nnonroot:x:65532:\n",
}

// buildLayer writes the files, their parent directories, a world-writable
// /tmp, root's home and the accounts into one tar, with fixed timestamps so
// the image is reproducible.
func buildLayer(files []file) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := map[string]int64{"tmp": 01777, "etc": 0o755, "root": 0o700}
	for _, f := range files {
		for d := path.Dir(strings.TrimPrefix(f.dst, "/")); d != "." && d != "/"; d = path.Dir(d) {
			if _, ok := dirs[d]; !ok {
				dirs[d] = 0o755
			}
		}
	}
	names := make([]string, 0, len(dirs))
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)
	for _, d := range names {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: dirs[d], ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	accountNames := make([]string, 0, len(accounts))
	for n := range accounts {
		accountNames = append(accountNames, n)
	}
	sort.Strings(accountNames)
	for _, n := range accountNames {
		if slices.ContainsFunc(files, func(f file) bool { return strings.TrimPrefix(f.dst, "/") == n }) {
			continue
		}
		data := accounts[n]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(data)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := io.WriteString(tw, data); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(f.src)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f.src, err)
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.dst, "/"), Mode: 0o755, Size: int64(len(data)), ModTime: epoch}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
