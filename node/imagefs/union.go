// Package imagefs reads a file of a container's root filesystem before the
// container exists, from the snapshot the runtime prepared for it, the way
// containerd itself reads the image's /etc/passwd to resolve a user
// (containerd pkg/oci/spec_opts.go WithUser, on the same snapshot): NRI's
// CreateContainer comes after the snapshot is prepared and before runc
// mounts it. Nothing is mounted: the snapshot's directories are read as
// overlayfs would merge them, every path resolved inside the image (an
// absolute symlink or ".." never leaves it), every component looked up
// relative to its parent directory's descriptor without following
// symlinks, and only a regular file read, within a byte bound.
//
// A lookup is bounded whatever the image holds: its context is consulted
// before every step, it takes at most MaxWalk steps and follows at most
// MaxSymlinks symlinks, and each step is at most three system calls on one
// name relative to its parent directory's descriptor, so a symlink chain
// through deep directories costs steps, not depth squared.
package imagefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// Bounds of one lookup.
const (
	// MaxSymlinks is how many symlinks one lookup follows (the kernel's
	// MAXSYMLINKS).
	MaxSymlinks = 40
	// MaxWalk is how many steps one lookup takes: each path component
	// counts one, and one more for every layer it is looked up in. Reading
	// /etc/passwd from a 128-layer image takes under 600.
	MaxWalk = 4096
)

// Errors a lookup returns.
var (
	ErrNotExist   = errors.New("no such file in the image")
	ErrNotRegular = errors.New("not a regular file")
	ErrTooLarge   = errors.New("larger than the bound")
	ErrLoop       = errors.New("too many symbolic links")
	ErrTooComplex = fmt.Errorf("takes more than %d steps (path components, each once per layer it is looked up in)", MaxWalk)
	// ErrOpacityUnknown: the file was found below a layer whose directory
	// on the path may be opaque, which this process cannot tell: overlayfs
	// keeps that mark in a trusted.* extended attribute, hidden from a
	// process without CAP_SYS_ADMIN.
	ErrOpacityUnknown = errors.New("found in a lower layer below a directory that may be opaque (trusted.overlay.opaque is hidden without CAP_SYS_ADMIN)")
)

// Union is a root filesystem as overlayfs merges its layers: Layers[0] is
// the top one (the container's upper directory), each a host directory.
// A single directory (the native snapshotter, a bind mount) is a Union of
// one.
type Union struct {
	Layers []string
	// UserXattr says the overlay mount reads its whiteout and opaque marks
	// from user.overlay.* (mount option userxattr, rootless runtimes),
	// which any reader sees, instead of trusted.overlay.*.
	UserXattr bool
	// MergeHidden treats a directory whose opaque mark this process cannot
	// read (trusted.overlay.* without CAP_SYS_ADMIN) as merged, as overlayfs
	// does for every directory that carries no mark, instead of failing
	// with ErrOpacityUnknown. A later layer that touches /etc (apt-get after
	// useradd) leaves /etc in several layers, and only an image that replaced
	// the directory wholesale reads differently.
	MergeHidden bool
}

// ReadFile reads name (an absolute path in the image) within max bytes.
func (u Union) ReadFile(ctx context.Context, name string, max int64) ([]byte, error) {
	f, err := u.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := readBounded(f, max)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: %w of %d bytes", name, ErrTooLarge, max)
	}
	return b, nil
}

// readBounded reads f up to max+1 bytes into a buffer sized from f's
// length, so that a file within the bound costs its own size once.
func readBounded(f *os.File, max int64) ([]byte, error) {
	size := max + 1
	if st, err := f.Stat(); err == nil && st.Size() < max {
		size = st.Size() + 1
	}
	b := make([]byte, 0, size)
	for int64(len(b)) <= max {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := f.Read(b[len(b):min(int64(cap(b)), max+1)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Open opens name, a regular file, for reading. It stops with ctx's error
// as soon as ctx ends.
func (u Union) Open(ctx context.Context, name string) (*os.File, error) {
	w, err := newWalk(ctx, u)
	if err != nil {
		return nil, err
	}
	defer w.close()
	f, err := w.open(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return f, nil
}
