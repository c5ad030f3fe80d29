// Command report is the e2e test image: it prints, as one JSON line on stdout,
// what the container really got from the kubelet, the runtime and the kernel
// (environment, effective capabilities, RLIMIT_MEMLOCK, /dev/infiniband device
// nodes, network interfaces, the NCCL conf file, the NCCL settings resolved in
// NCCL's order), then sleeps until it is stopped so the harness can read it
// with `kubectl logs`.
//
//	report            print, then wait for SIGTERM
//	report -once      print and exit
//	report -empty-env run `report -once` with an empty environment (what
//	                  `env -i` does) and print its line; the image has no
//	                  env binary
//	report -ssh-env   the same with what sshd gives a session
//	                  (openssh session.c do_setup_env): HOME, USER, LOGNAME
//	                  and SHELL from the passwd entry of the uid, and PATH
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Report is the JSON document the test image prints.
type Report struct {
	UID          int               `json:"uid"`
	GID          int               `json:"gid"`
	Env          map[string]string `json:"env"`
	CapEff       string            `json:"capEff"`
	Capabilities []string          `json:"capabilities"`
	Memlock      Rlimit            `json:"memlock"`
	Devices      []Device          `json:"devices"`
	Interfaces   []Interface       `json:"interfaces"`
	NCCLConf     *File             `json:"ncclConf,omitempty"`
	NCCL         NCCLResolution    `json:"nccl"`
	// NCCLEnvHome is the resolution of NCCL >= 2.30.3, whose home is $HOME.
	NCCLEnvHome NCCLResolution `json:"ncclEnvHome"`
	Errors      []string       `json:"errors,omitempty"`
}

// Rlimit is a resource limit; -1 means unlimited.
type Rlimit struct {
	Soft int64 `json:"soft"`
	Hard int64 `json:"hard"`
}

// Device is a node under /dev/infiniband.
type Device struct {
	Path  string `json:"path"`
	Type  string `json:"type"`
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
}

// Interface is a network interface and its addresses.
type Interface struct {
	Name  string   `json:"name"`
	Addrs []string `json:"addrs"`
}

// File is a file named by the environment and its content.
type File struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// capNames are the Linux capability numbers in order (capability.h).
var capNames = []string{
	"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
	"IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
	"SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
	"LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
	"WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-empty-env" {
		os.Exit(runWithEnv([]string{}))
	}
	if len(os.Args) > 1 && os.Args[1] == "-ssh-env" {
		os.Exit(runWithEnv(sshEnv(os.Getuid(), "/etc/passwd")))
	}
	r := collect()
	out, err := json.Marshal(r)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	fmt.Println(string(out))
	if len(os.Args) > 1 && os.Args[1] == "-once" {
		return
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
}

func collect() Report {
	r := Report{UID: os.Getuid(), GID: os.Getgid(), Env: map[string]string{}}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		r.Env[k] = v
	}
	if err := r.readCaps(); err != nil {
		r.Errors = append(r.Errors, err.Error())
	}
	var rl syscall.Rlimit
	const rlimitMemlock = 8 // RLIMIT_MEMLOCK on Linux
	if err := syscall.Getrlimit(rlimitMemlock, &rl); err != nil {
		r.Errors = append(r.Errors, "getrlimit: "+err.Error())
	}
	r.Memlock = Rlimit{Soft: limit(rl.Cur), Hard: limit(rl.Max)}
	r.Devices = devices("/dev/infiniband")
	ifs, err := net.Interfaces()
	if err != nil {
		r.Errors = append(r.Errors, "interfaces: "+err.Error())
	}
	for _, i := range ifs {
		it := Interface{Name: i.Name, Addrs: []string{}}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			it.Addrs = append(it.Addrs, a.String())
		}
		r.Interfaces = append(r.Interfaces, it)
	}
	r.NCCL = resolveNCCL(os.Environ(), os.Getuid(), "/etc/passwd", "/etc/nccl.conf", false)
	r.NCCLEnvHome = resolveNCCL(os.Environ(), os.Getuid(), "/etc/passwd", "/etc/nccl.conf", true)
	if p := os.Getenv("NCCL_CONF_FILE"); p != "" {
		data, err := os.ReadFile(p)
		if err != nil {
			r.Errors = append(r.Errors, "nccl conf: "+err.Error())
		}
		r.NCCLConf = &File{Path: p, Content: string(data)}
	}
	return r
}

func limit(v uint64) int64 {
	if v == ^uint64(0) {
		return -1
	}
	return int64(v)
}

func (r *Report) readCaps() error {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		v, ok := strings.CutPrefix(s.Text(), "CapEff:")
		if !ok {
			continue
		}
		r.CapEff = strings.TrimSpace(v)
		caps, err := capabilities(r.CapEff)
		if err != nil {
			return err
		}
		r.Capabilities = caps
		return nil
	}
	return s.Err()
}

// capabilities names the bits of a /proc/<pid>/status capability mask.
func capabilities(mask string) ([]string, error) {
	bits, err := strconv.ParseUint(mask, 16, 64)
	if err != nil {
		return nil, fmt.Errorf("capability mask %q: %w", mask, err)
	}
	out := []string{}
	for i, n := range capNames {
		if bits&(1<<uint(i)) != 0 {
			out = append(out, "CAP_"+n)
		}
	}
	return out, nil
}

// devNumber splits a Linux dev_t into major and minor (glibc's gnu_dev_major/minor
// for the 32-bit range).
func devNumber(rdev uint64) (major, minor uint32) {
	return uint32((rdev >> 8) & 0xfff), uint32((rdev & 0xff) | ((rdev >> 12) & 0xfff00))
}

func devices(dir string) []Device {
	out := []Device{}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) != nil {
			return nil
		}
		typ := "other"
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFCHR:
			typ = "char"
		case syscall.S_IFBLK:
			typ = "block"
		case syscall.S_IFREG:
			typ = "file"
		}
		major, minor := devNumber(st.Rdev)
		out = append(out, Device{Path: p, Type: typ, Major: major, Minor: minor})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// runEmptyEnv runs this binary with -once and no environment at all, as
// `env -i` would, and passes its output through.
// runWithEnv runs `report -once` with exactly env (empty, not nil: nil
// would inherit ours) and prints its line.
func runWithEnv(env []string) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		return 1
	}
	cmd := exec.Command(self, "-once")
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		return 1
	}
	return 0
}

// sshEnv is the environment sshd gives a session of uid (openssh
// session.c do_setup_env): HOME is the passwd entry's home directory, never
// the container's HOME.
func sshEnv(uid int, passwd string) []string {
	env := []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin"}
	if e, ok := passwdEntry(passwd, uid); ok {
		env = append(env, "USER="+e[0], "LOGNAME="+e[0], "HOME="+e[5], "SHELL="+e[6])
	}
	return env
}
