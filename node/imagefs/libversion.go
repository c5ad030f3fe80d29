package imagefs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
)

// Library is a communication library found in an image.
type Library struct {
	// Name is "NCCL" or "RCCL".
	Name string
	// Version is as its source writes it ("2.21.5", "2.21.5-1+cuda12.4").
	Version string
	// From is the file it was read from.
	From string
}

// ReadFunc reads an absolute path of an image within max bytes, returning
// an error wrapping ErrNotExist when the image has no such file.
type ReadFunc func(ctx context.Context, name string, max int64) ([]byte, error)

// Bounds of what FindLibraries reads.
const (
	// DpkgStatusMaxBytes bounds /var/lib/dpkg/status (a CUDA or ROCm image's
	// is 1-3 MB).
	DpkgStatusMaxBytes = 16 << 20
	// HeaderMaxBytes bounds nccl.h (about 30 KB).
	HeaderMaxBytes = 256 << 10
)

// dpkgStatus is where Debian and Ubuntu images list their packages; NCCL's
// runtime package is libnccl2, RCCL's rccl.
const dpkgStatus = "/var/lib/dpkg/status"

// headerPaths are where an image keeps nccl.h, whose NCCL_MAJOR, NCCL_MINOR
// and NCCL_PATCH give the version without reading the library (hundreds of
// MB): the system's (libnccl-dev, NVIDIA's NGC images) and the Python
// wheel's (nvidia-nccl-cu12/-cu13, which PyTorch loads:
// site-packages/nvidia/nccl/include/nccl.h beside lib/libnccl.so.2).
func headerPaths() []string {
	paths := []string{"/usr/include/nccl.h", "/usr/local/include/nccl.h", "/usr/lib/python3/dist-packages/nvidia/nccl/include/nccl.h"}
	for minor := 8; minor <= 14; minor++ {
		py := fmt.Sprintf("python3.%d", minor)
		for _, dir := range []string{"/usr/local/lib/" + py + "/dist-packages", "/usr/local/lib/" + py + "/site-packages", "/opt/conda/lib/" + py + "/site-packages"} {
			paths = append(paths, dir+"/nvidia/nccl/include/nccl.h")
		}
	}
	return paths
}

// FindLibraries reads which NCCL and RCCL versions an image holds: the
// dpkg database's libnccl2 and rccl, and each nccl.h of headerPaths. A
// file the image lacks is skipped; one that cannot be read is named in
// the returned error, with what was found regardless.
func FindLibraries(ctx context.Context, read ReadFunc) ([]Library, error) {
	var out []Library
	var errs []error
	b, err := read(ctx, dpkgStatus, DpkgStatusMaxBytes)
	switch {
	case err == nil:
		out = append(out, dpkgLibraries(b)...)
	case !errors.Is(err, ErrNotExist):
		errs = append(errs, err)
	}
	for _, p := range headerPaths() {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		b, err := read(ctx, p, HeaderMaxBytes)
		switch {
		case errors.Is(err, ErrNotExist):
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		}
		if v, ok := headerVersion(b); ok {
			out = append(out, Library{Name: "NCCL", Version: v, From: p})
		}
	}
	return out, errors.Join(errs...)
}

// dpkgLibraries reads the installed libnccl2 and rccl packages of a dpkg
// status file (stanzas of "Field: value" lines, blank-line separated).
func dpkgLibraries(status []byte) []Library {
	names := map[string]string{"libnccl2": "NCCL", "rccl": "RCCL"}
	var out []Library
	var pkg, version, state string
	flush := func() {
		if lib, ok := names[pkg]; ok && version != "" && strings.HasSuffix(state, " installed") {
			out = append(out, Library{Name: lib, Version: version, From: dpkgStatus + " " + pkg})
		}
		pkg, version, state = "", "", ""
	}
	s := bufio.NewScanner(bytes.NewReader(status))
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		switch {
		case line == "":
			flush()
		case strings.HasPrefix(line, "Package: "):
			pkg = strings.TrimSpace(strings.TrimPrefix(line, "Package: "))
		case strings.HasPrefix(line, "Version: "):
			version = strings.TrimSpace(strings.TrimPrefix(line, "Version: "))
		case strings.HasPrefix(line, "Status: "):
			state = strings.TrimSpace(strings.TrimPrefix(line, "Status: "))
		}
	}
	flush()
	return out
}

// headerVersion reads "#define NCCL_MAJOR 2", NCCL_MINOR and NCCL_PATCH
// (NVIDIA/nccl src/nccl.h.in) as "2.21.5".
func headerVersion(h []byte) (string, bool) {
	got := map[string]string{}
	for _, line := range strings.Split(string(h), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "#define" && (f[1] == "NCCL_MAJOR" || f[1] == "NCCL_MINOR" || f[1] == "NCCL_PATCH") {
			if _, seen := got[f[1]]; !seen && strings.Trim(f[2], "0123456789") == "" {
				got[f[1]] = f[2]
			}
		}
	}
	if len(got) != 3 {
		return "", false
	}
	return got["NCCL_MAJOR"] + "." + got["NCCL_MINOR"] + "." + got["NCCL_PATCH"], true
}
