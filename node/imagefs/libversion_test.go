package imagefs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// files is an image as a map of paths to contents.
func files(m map[string]string) ReadFunc {
	return func(_ context.Context, name string, max int64) ([]byte, error) {
		v, ok := m[name]
		switch {
		case !ok:
			return nil, fmt.Errorf("%s: %w", name, ErrNotExist)
		case int64(len(v)) > max:
			return nil, fmt.Errorf("%s: %w", name, ErrTooLarge)
		}
		return []byte(v), nil
	}
}

// ncclHeader is the part of nccl.h that names the version, as NCCL's
// build writes it from src/nccl.h.in.
func ncclHeader(major, minor, patch int) string {
	return fmt.Sprintf("#ifndef NCCL_H_\n#define NCCL_H_\n\n#include <cuda_runtime.h>\n#define NCCL_MAJOR %d\n#define NCCL_MINOR %d\n#define NCCL_PATCH %d\n#define NCCL_SUFFIX \"\"\n\n#define NCCL_VERSION_CODE %d\n", major, minor, patch, major*10000+minor*100+patch)
}

const dpkg = `Package: libc6
Status: install ok installed
Version: 2.39-0ubuntu8.4

Package: libnccl2
Status: install ok installed
Architecture: amd64
Version: 2.28.3-1+cuda13.0
Description: NVIDIA Collective Communication Library (NCCL) Runtime

Package: libnccl-dev
Status: deinstall ok config-files
Version: 2.19.3-1+cuda12.3

Package: rccl
Status: install ok installed
Version: 2.22.3.60400-114~24.04
`

// TestFindLibraries: the H200 host's two NCCLs (the system's 2.28.3 from
// dpkg, PyTorch's wheel 2.28.9 from its nccl.h), a ROCm image's RCCL, and
// an image without either.
func TestFindLibraries(t *testing.T) {
	t.Parallel()
	wheel := "/usr/local/lib/python3.12/dist-packages/nvidia/nccl/include/nccl.h"
	for _, tc := range []struct {
		name  string
		image map[string]string
		want  []Library
	}{
		{"h200 host", map[string]string{dpkgStatus: dpkg, wheel: ncclHeader(2, 28, 9)}, []Library{
			{Name: "NCCL", Version: "2.28.3-1+cuda13.0", From: "/var/lib/dpkg/status libnccl2"},
			{Name: "RCCL", Version: "2.22.3.60400-114~24.04", From: "/var/lib/dpkg/status rccl"},
			{Name: "NCCL", Version: "2.28.9", From: wheel},
		}},
		{"conda", map[string]string{"/opt/conda/lib/python3.10/site-packages/nvidia/nccl/include/nccl.h": ncclHeader(2, 19, 3)}, []Library{
			{Name: "NCCL", Version: "2.19.3", From: "/opt/conda/lib/python3.10/site-packages/nvidia/nccl/include/nccl.h"},
		}},
		{"template header", map[string]string{"/usr/include/nccl.h": "#define NCCL_MAJOR ${nccl:Major}\n#define NCCL_MINOR 1\n#define NCCL_PATCH 2\n"}, nil},
		{"no libraries", map[string]string{"/etc/passwd": "root:x:0:0::/root:/bin/bash\n"}, nil},
	} {
		got, err := FindLibraries(context.Background(), files(tc.image))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s: (-want +got)\n%s", tc.name, d)
		}
	}
}

// TestFindLibrariesErrors: a file that cannot be read is named, and what
// was found still comes back.
func TestFindLibrariesErrors(t *testing.T) {
	t.Parallel()
	read := func(ctx context.Context, name string, max int64) ([]byte, error) {
		if name == dpkgStatus {
			return nil, fmt.Errorf("%s: %w", name, ErrTooLarge)
		}
		return files(map[string]string{"/usr/include/nccl.h": ncclHeader(2, 21, 5)})(ctx, name, max)
	}
	got, err := FindLibraries(context.Background(), read)
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("error %v, want one wrapping ErrTooLarge", err)
	}
	if len(got) != 1 || got[0].Version != "2.21.5" {
		t.Errorf("found %+v, want NCCL 2.21.5 from /usr/include/nccl.h", got)
	}
}

// BenchmarkFindLibraries: what finding the NCCL versions costs inside NRI's
// CreateContainer, through a five-layer overlay snapshot: a PyTorch image
// (a 1 MB dpkg database listing libnccl2, the wheel's nccl.h) and an image
// with neither (every probe misses). cpu-ms/op is the CPU of one search.
func BenchmarkFindLibraries(b *testing.B) {
	var status strings.Builder
	for i := range 500 {
		fmt.Fprintf(&status, "Package: pkg%d\nStatus: install ok installed\nVersion: 1.%d\nDescription: %s\n\n", i, i, strings.Repeat("x", 2000))
	}
	status.WriteString(dpkg)
	wheel := "usr/local/lib/python3.12/dist-packages/nvidia/nccl/include/nccl.h"
	for _, c := range []struct {
		name  string
		files map[string]string
	}{
		{"torch-image", map[string]string{"var/lib/dpkg/status": status.String(), wheel: ncclHeader(2, 28, 9) + strings.Repeat("// api\n", 4000)}},
		{"no-nccl", map[string]string{"etc/passwd": "root:x:0:0::/root:/bin/sh\n"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var u Union
			for i := range 5 {
				entries := map[string]string{"usr/lib/x/": "", "usr/local/lib/python3.12/dist-packages/": ""}
				if i == 3 {
					for k, v := range c.files {
						entries[k] = v
					}
				}
				u.Layers = append(u.Layers, layer(b, entries))
			}
			b.ReportAllocs()
			start := cpuTime(b)
			for b.Loop() {
				if _, err := FindLibraries(context.Background(), u.ReadFile); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N)/1e6, "cpu-ms/op")
		})
	}
}
