package imagefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// walk is one lookup: the layers' roots, what it may still spend, and the
// directories resolved so far.
type walk struct {
	ctx   context.Context
	roots []int
	// marks is where overlayfs keeps whiteout and opaque marks
	// ("trusted.overlay." or "user.overlay."); visible says whether this
	// process can read them.
	marks   string
	visible bool
	steps   int
	links   int
	stack   []level
	linkBuf []byte
	markBuf [1]byte
}

// level is a resolved directory: its directory in each layer that merges
// into it, top first, down to the first opaque one.
type level struct {
	dirs []layerDir
	// root: the image's root, which overlayfs merges from every layer
	// without looking for an opaque mark.
	root bool
}

type layerDir struct {
	layer int
	fd    int
	// whiteouts: the directory's opaque mark is "x", so a zero-size
	// regular file marked overlay.whiteout in it is a whiteout.
	whiteouts bool
}

func newWalk(ctx context.Context, u Union) (*walk, error) {
	w := &walk{ctx: ctx, marks: "trusted.overlay.", linkBuf: make([]byte, unix.PathMax)}
	if u.UserXattr {
		w.marks = "user.overlay."
	}
	w.visible = u.UserXattr || u.MergeHidden || trustedXattrsVisible()
	root := level{root: true}
	for i, l := range u.Layers {
		fd, err := unix.Open(l, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			w.close()
			return nil, fmt.Errorf("open layer %s: %w", l, err)
		}
		w.roots = append(w.roots, fd)
		root.dirs = append(root.dirs, layerDir{layer: i, fd: fd, whiteouts: w.mark(fd, "opaque") == 'x'})
	}
	w.stack = []level{root}
	return w, nil
}

// close releases every directory the walk holds open.
func (w *walk) close() {
	for len(w.stack) > 1 {
		w.pop()
	}
	for _, fd := range w.roots {
		unix.Close(fd)
	}
	w.roots, w.stack = nil, nil
}

func (w *walk) pop() {
	for _, d := range w.stack[len(w.stack)-1].dirs {
		unix.Close(d.fd)
	}
	w.stack = w.stack[:len(w.stack)-1]
}

// step spends one step of the walk's budget, and stops the walk once its
// context has ended.
func (w *walk) step() error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	w.steps++
	if w.steps > MaxWalk {
		return ErrTooComplex
	}
	return nil
}

// open resolves name component by component, as the kernel would in the
// merged root, and opens the regular file it names.
func (w *walk) open(name string) (*os.File, error) {
	rest := pathRest{name}
	for {
		c, ok := rest.next()
		if !ok {
			return nil, ErrNotRegular
		}
		if err := w.step(); err != nil {
			return nil, err
		}
		if f, err := w.component(c, &rest); f != nil || err != nil {
			return f, err
		}
	}
}

// component resolves c in the current directory: it enters a directory,
// follows a symlink, or opens the regular file the path ends at.
func (w *walk) component(c string, rest *pathRest) (*os.File, error) {
	switch c {
	case "", ".":
		return nil, nil
	case "..":
		if len(w.stack) > 1 {
			w.pop()
		}
		return nil, nil
	}
	cur := w.stack[len(w.stack)-1]
	pos, st, err := w.lookup(cur, c)
	if err != nil {
		return nil, err
	}
	if pos > 0 && !cur.root && !w.visible {
		return nil, ErrOpacityUnknown
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return nil, w.follow(cur.dirs[pos].fd, c, rest)
	case unix.S_IFDIR:
		if rest.empty() {
			return nil, ErrNotRegular
		}
		return nil, w.enter(cur.dirs[pos:], c)
	case unix.S_IFREG:
		if !rest.empty() {
			return nil, ErrNotExist
		}
		return openRegular(cur.dirs[pos].fd, c)
	}
	return nil, ErrNotRegular
}

// lookup finds c in the directory cur as overlayfs does: in the topmost of
// its layers that has it; a whiteout there hides it. pos is that layer's
// place in cur.
func (w *walk) lookup(cur level, c string) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	for i, d := range cur.dirs {
		if err := w.step(); err != nil {
			return 0, st, err
		}
		err := unix.Fstatat(d.fd, c, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			continue
		}
		if err != nil {
			return 0, st, fmt.Errorf("look up %q in layer %d: %w", c, d.layer, err)
		}
		if isWhiteout(st) || d.whiteouts && w.xattrWhiteout(d.fd, c, st) {
			break
		}
		return i, st, nil
	}
	return 0, st, ErrNotExist
}

// enter pushes the directory c, merged from the layers of dirs (the first
// has it as a directory) down to the first where it is opaque or not a
// directory.
func (w *walk) enter(dirs []layerDir, c string) error {
	var next level
	for i, d := range dirs {
		if i > 0 {
			if err := w.step(); err != nil {
				closeAll(next.dirs)
				return err
			}
			var st unix.Stat_t
			err := unix.Fstatat(d.fd, c, &st, unix.AT_SYMLINK_NOFOLLOW)
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
				continue
			}
			if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				break
			}
		}
		fd, err := unix.Openat(d.fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			closeAll(next.dirs)
			return fmt.Errorf("open directory %q in layer %d: %w", c, d.layer, err)
		}
		opaque := w.mark(fd, "opaque")
		next.dirs = append(next.dirs, layerDir{layer: d.layer, fd: fd, whiteouts: opaque == 'x'})
		if opaque == 'y' {
			break
		}
	}
	w.stack = append(w.stack, next)
	return nil
}

// follow reads the symlink c and puts its target before the rest of the
// path: an absolute target resolves from the image's root.
func (w *walk) follow(dirfd int, c string, rest *pathRest) error {
	w.links++
	if w.links > MaxSymlinks {
		return ErrLoop
	}
	n, err := unix.Readlinkat(dirfd, c, w.linkBuf)
	if err != nil {
		return fmt.Errorf("readlink %q: %w", c, err)
	}
	if n >= len(w.linkBuf) {
		return fmt.Errorf("readlink %q: target longer than %d bytes", c, len(w.linkBuf)-1)
	}
	target := string(w.linkBuf[:n])
	if strings.HasPrefix(target, "/") {
		for len(w.stack) > 1 {
			w.pop()
		}
	}
	rest.push(target)
	return nil
}

// mark reads overlayfs's mark name of the directory fd: 'y' or 'x' for
// opaque, 0 for none or none this process can see.
func (w *walk) mark(fd int, name string) byte {
	if !w.visible {
		return 0
	}
	if n, err := unix.Fgetxattr(fd, w.marks+name, w.markBuf[:]); err == nil && n == 1 {
		return w.markBuf[0]
	}
	return 0
}

// xattrWhiteout tells whether c, in a directory marked opaque "x", is the
// other form of whiteout: a zero-size regular file marked overlay.whiteout.
func (w *walk) xattrWhiteout(dirfd int, c string, st unix.Stat_t) bool {
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != 0 {
		return false
	}
	fd, err := unix.Openat(dirfd, c, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	_, err = unix.Fgetxattr(fd, w.marks+"whiteout", nil)
	return err == nil
}

// openRegular opens c for reading without blocking (a FIFO would wait for
// a writer) and checks it is a regular file.
func openRegular(dirfd int, c string) (*os.File, error) {
	fd, err := unix.Openat(dirfd, c, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %q: %w", c, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, ErrNotRegular
	}
	return os.NewFile(uintptr(fd), c), nil
}

func isWhiteout(st unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

func closeAll(dirs []layerDir) {
	for _, d := range dirs {
		unix.Close(d.fd)
	}
}

// pathRest is what is left of a path to resolve, as a stack of path tails:
// a symlink's target goes on top of the rest. Components are cut off as
// they are resolved, so a long path costs no slice of its components.
type pathRest []string

func (r *pathRest) next() (string, bool) {
	for len(*r) > 0 {
		top := len(*r) - 1
		if (*r)[top] == "" {
			*r = (*r)[:top]
			continue
		}
		c, tail, _ := strings.Cut((*r)[top], "/")
		(*r)[top] = tail
		return c, true
	}
	return "", false
}

func (r *pathRest) push(p string) { *r = append(*r, p) }

func (r pathRest) empty() bool {
	for _, p := range r {
		if p != "" {
			return false
		}
	}
	return true
}
