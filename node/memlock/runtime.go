package memlock

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// DefaultSocketPath is where containerd serves NRI unless configured
// otherwise (containerd's plugins.nri socket_path default).
const DefaultSocketPath = "/var/run/nri/nri.sock"

// RuntimeNames are the process names (/proc/<pid>/comm) of container
// runtimes that serve NRI, tried when the socket's peer is not visible.
var RuntimeNames = []string{"containerd", "crio"}

// ParseProcLimits returns the "Max locked memory" line of a /proc/<pid>/limits
// file.
func ParseProcLimits(data []byte) (Limit, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "Max locked memory")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			return Limit{}, fmt.Errorf("malformed limits line %q", line)
		}
		soft, err := parseProcValue(f[0])
		if err != nil {
			return Limit{}, fmt.Errorf("soft limit in %q: %w", line, err)
		}
		hard, err := parseProcValue(f[1])
		if err != nil {
			return Limit{}, fmt.Errorf("hard limit in %q: %w", line, err)
		}
		return Limit{Soft: soft, Hard: hard}, nil
	}
	return Limit{}, errors.New(`no "Max locked memory" line`)
}

func parseProcValue(s string) (uint64, error) {
	if s == "unlimited" {
		return Unlimited, nil
	}
	return strconv.ParseUint(s, 10, 64)
}

// ReadProcessLimit reads the RLIMIT_MEMLOCK of process pid under procRoot.
func ReadProcessLimit(procRoot string, pid int) (Limit, error) {
	path := filepath.Join(procRoot, strconv.Itoa(pid), "limits")
	data, err := os.ReadFile(path)
	if err != nil {
		return Limit{}, fmt.Errorf("read runtime limits: %w", err)
	}
	l, err := ParseProcLimits(data)
	if err != nil {
		return Limit{}, fmt.Errorf("parse %s: %w", path, err)
	}
	return l, nil
}

// FindProcess returns the lowest pid under procRoot whose comm is one of
// names, or 0.
func FindProcess(procRoot string, names []string) (pid int, name string) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return 0, ""
	}
	var pids []int
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > 0 {
			pids = append(pids, n)
		}
	}
	sort.Ints(pids)
	for _, p := range pids {
		comm, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(p), "comm"))
		if err != nil {
			continue
		}
		c := strings.TrimSpace(string(comm))
		for _, want := range names {
			if c == want {
				return p, c
			}
		}
	}
	return 0, ""
}

// PeerPID returns the pid of the process at the other end of a unix socket
// connection (SO_PEERCRED), or 0 when it cannot be known (not a unix socket,
// or the peer lives in a pid namespace this process does not see).
func PeerPID(c net.Conn) int {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0
	}
	var (
		cred    *syscall.Ucred
		credErr error
	)
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || credErr != nil || cred == nil {
		return 0
	}
	return int(cred.Pid)
}

// RuntimeLimit is what the agent learned about the runtime's memlock.
type RuntimeLimit struct {
	PID    int    `json:"pid"`
	Source string `json:"source"` // "peer" (SO_PEERCRED) or the process name matched
	Limit  Limit  `json:"limit"`
}

// LearnRuntimeLimit reads the RLIMIT_MEMLOCK of the runtime: of peerPID when
// known and readable under procRoot, else of the first process named like a
// runtime.
func LearnRuntimeLimit(procRoot string, peerPID int) (RuntimeLimit, error) {
	var errs []error
	if peerPID > 0 {
		l, err := ReadProcessLimit(procRoot, peerPID)
		if err == nil {
			return RuntimeLimit{PID: peerPID, Source: "peer", Limit: l}, nil
		}
		errs = append(errs, fmt.Errorf("NRI socket peer pid %d: %w", peerPID, err))
	}
	pid, name := FindProcess(procRoot, RuntimeNames)
	if pid == 0 {
		errs = append(errs, fmt.Errorf("no process named %s under %s", strings.Join(RuntimeNames, " or "), procRoot))
		return RuntimeLimit{}, errors.Join(errs...)
	}
	l, err := ReadProcessLimit(procRoot, pid)
	if err != nil {
		return RuntimeLimit{}, errors.Join(append(errs, err)...)
	}
	return RuntimeLimit{PID: pid, Source: name, Limit: l}, nil
}
