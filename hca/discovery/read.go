package discovery

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxAttrSize bounds one attribute read. A sysfs show() method fills one
// page-sized buffer (Linux Documentation/filesystems/sysfs.rst, "Reading/
// Writing Attribute Data"; sysfs_emit refuses to write past it), and every
// attribute discovery reads is a line of a few dozen bytes: a tree whose file
// is linked to /dev/zero, or holds a log, must not make discovery read
// without end.
const MaxAttrSize = 4096

// errNotRegular is the cause when an attribute is a FIFO, socket or device
// rather than a file; reading those could block forever or never end.
var errNotRegular = errors.New("not a regular file")

// readAttr reads one small attribute file, bounded and without blocking:
// the file is opened O_NONBLOCK (a FIFO opens at once instead of waiting for
// a writer) and fstat'ed on the open descriptor, so what is read is what was
// checked. Sysfs attributes are regular files whose stat size is the page
// size, not the content's length, hence the read up to MaxAttrSize. Raw
// system calls keep a read to four of them and one allocation: the port
// poll does this many times a second.
func readAttr(path string) (string, error) {
	var buf [MaxAttrSize + 1]byte
	n, err := readInto(path, buf[:])
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// ReadFile reads a small regular file as readAttr does (non-blocking open,
// fstat on the descriptor, bounded read), for files that are not sysfs
// attributes but must not hang or exhaust a command either (/proc/modules,
// a netdev's operstate). A file longer than max is an error.
func ReadFile(path string, max int) ([]byte, error) {
	buf := make([]byte, max+1)
	n, err := readInto(path, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// readInto fills buf from path; the file must be regular and shorter than
// buf.
func readInto(path string, buf []byte) (int, error) {
	fd, err := openNoBlock(path)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (%s)", errNotRegular, fileKind(st.Mode))}
	}
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	if n == len(buf) {
		return 0, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("longer than %d bytes", len(buf)-1)}
	}
	return n, nil
}

func openNoBlock(path string) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a char device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFDIR:
		return "a directory"
	default:
		return fmt.Sprintf("file type %#o", mode&unix.S_IFMT)
	}
}

// cause is the short reason an attribute could not be read, for a health
// reason: "permission denied", "not a regular file (a FIFO)", "too many
// levels of symbolic links".
func cause(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
