// Package imagefs reads a file of a container's root filesystem before the
// container exists, from the snapshot the runtime prepared for it, the way
// containerd itself reads the image's /etc/passwd to resolve a user
// (containerd pkg/oci/spec_opts.go WithUser, on the same snapshot): NRI's
// CreateContainer comes after the snapshot is prepared and before runc
// mounts it. Nothing is mounted: the snapshot's directories are read as
// overlayfs would merge them, every path resolved inside the image (an
// absolute symlink or ".." never leaves it), every component opened without
// following symlinks, and only a regular file read, within a byte bound.
package imagefs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// maxSymlinks is how many symlinks one lookup follows (the kernel's
// MAXSYMLINKS).
const maxSymlinks = 40

// Errors a lookup returns.
var (
	ErrNotExist   = errors.New("no such file in the image")
	ErrNotRegular = errors.New("not a regular file")
	ErrTooLarge   = errors.New("larger than the bound")
	ErrLoop       = errors.New("too many symbolic links")
)

// Union is a root filesystem as overlayfs merges its layers: Layers[0] is
// the top one (the container's upper directory), each a host directory.
// A single directory (the native snapshotter, a bind mount) is a Union of
// one.
type Union struct {
	Layers []string
}

// ReadFile reads name (an absolute path in the image) within max bytes.
func (u Union) ReadFile(name string, max int64) ([]byte, error) {
	f, err := u.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: %w of %d bytes", name, ErrTooLarge, max)
	}
	return b, nil
}

// Open opens name, a regular file, for reading.
func (u Union) Open(name string) (*os.File, error) {
	roots := make([]*os.File, len(u.Layers))
	for i, l := range u.Layers {
		r, err := os.OpenFile(l, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open layer %s: %w", l, err)
		}
		defer r.Close()
		roots[i] = r
	}
	all := make([]int, len(roots))
	for i := range all {
		all[i] = i
	}
	// stack holds, per resolved directory, its path and the layers that
	// make it up (top first).
	type dir struct {
		path   string
		layers []int
	}
	stack := []dir{{".", all}}
	comps := splitPath(name)
	links := 0
	for len(comps) > 0 {
		c := comps[0]
		comps = comps[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) > 1 {
				stack = stack[:len(stack)-1]
			}
			continue
		}
		cur := stack[len(stack)-1]
		p := path.Join(cur.path, c)
		top, st, err := lookup(roots, cur.layers, p)
		if err != nil {
			return nil, err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			links++
			if links > maxSymlinks {
				return nil, fmt.Errorf("%s: %w", name, ErrLoop)
			}
			target, err := readlink(roots[top], p)
			if err != nil {
				return nil, err
			}
			if strings.HasPrefix(target, "/") {
				stack = stack[:1]
			}
			comps = append(splitPath(target), comps...)
		case unix.S_IFDIR:
			if len(comps) == 0 {
				return nil, fmt.Errorf("%s: %w", name, ErrNotRegular)
			}
			stack = append(stack, dir{p, dirLayers(roots, cur.layers, p)})
		case unix.S_IFREG:
			if len(comps) > 0 {
				return nil, fmt.Errorf("%s: %w", name, ErrNotExist)
			}
			return openRegular(roots[top], p)
		default:
			return nil, fmt.Errorf("%s: %w", name, ErrNotRegular)
		}
	}
	return nil, fmt.Errorf("%s: %w", name, ErrNotRegular)
}

// lookup finds the entry p in the topmost of layers that has it, as
// overlayfs does: an overlay whiteout (a 0:0 char device) hides it.
func lookup(roots []*os.File, layers []int, p string) (int, unix.Stat_t, error) {
	for _, i := range layers {
		st, err := lstatAt(roots[i], p)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			continue
		}
		if err != nil {
			return 0, st, fmt.Errorf("/%s: %w", p, err)
		}
		if isWhiteout(st) {
			break
		}
		return i, st, nil
	}
	return 0, unix.Stat_t{}, fmt.Errorf("/%s: %w", p, ErrNotExist)
}

// dirLayers are the layers whose p merges into the directory p: from the
// top down to the first where p is opaque or not a directory.
func dirLayers(roots []*os.File, layers []int, p string) []int {
	var out []int
	for _, i := range layers {
		st, err := lstatAt(roots[i], p)
		if err != nil {
			continue
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			break
		}
		out = append(out, i)
		if opaque(roots[i], p) {
			break
		}
	}
	return out
}

// resolveHow opens below a layer's root and never through a symlink: every
// directory on the way was resolved by Open itself.
var resolveHow = unix.OpenHow{Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}

func openAt(root *os.File, p string, flags uint64) (int, error) {
	how := resolveHow
	how.Flags = flags | unix.O_CLOEXEC | unix.O_NOFOLLOW
	for {
		fd, err := unix.Openat2(int(root.Fd()), p, &how)
		if err != unix.EINTR && err != unix.EAGAIN {
			return fd, err
		}
	}
}

func lstatAt(root *os.File, p string) (unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := openAt(root, p, unix.O_PATH)
	if err != nil {
		// RESOLVE_NO_SYMLINKS refuses the last component too when it is
		// a symlink: tell that apart from absence.
		if errors.Is(err, unix.ELOOP) {
			err = unix.Fstatat(int(root.Fd()), p, &st, unix.AT_SYMLINK_NOFOLLOW)
		}
		return st, err
	}
	defer unix.Close(fd)
	err = unix.Fstat(fd, &st)
	return st, err
}

func readlink(root *os.File, p string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(int(root.Fd()), p, buf)
	if err != nil {
		return "", fmt.Errorf("readlink /%s: %w", p, err)
	}
	if n >= len(buf) {
		return "", fmt.Errorf("readlink /%s: target too long", p)
	}
	return string(buf[:n]), nil
}

// openRegular opens p for reading without blocking (a FIFO would wait for
// a writer) and checks it is a regular file.
func openRegular(root *os.File, p string) (*os.File, error) {
	fd, err := openAt(root, p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, fmt.Errorf("open /%s: %w", p, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("/%s: %w", p, ErrNotRegular)
	}
	return os.NewFile(uintptr(fd), "/"+p), nil
}

func isWhiteout(st unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

// opaque tells whether overlayfs hides the lower layers' content of the
// directory p ("trusted.overlay.opaque" or, with userxattr,
// "user.overlay.opaque" set to "y").
func opaque(root *os.File, p string) bool {
	fd, err := openAt(root, p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	buf := make([]byte, 8)
	for _, attr := range []string{"trusted.overlay.opaque", "user.overlay.opaque"} {
		if n, err := unix.Fgetxattr(fd, attr, buf); err == nil && n == 1 && buf[0] == 'y' {
			return true
		}
	}
	return false
}

func splitPath(p string) []string {
	return strings.Split(p, "/")
}
