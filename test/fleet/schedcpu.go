//go:build fleet

package fleet

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of utime and stime in /proc/PID/stat: USER_HZ, 100
// on Linux whatever the kernel's HZ (proc(5), "clock ticks";
// sysconf(_SC_CLK_TCK)).
const userHZ = 100

// procCPU is the user plus system CPU time of a /proc/PID/stat line
// (fields 14 and 15, counted after the command name, which may itself
// hold spaces and parentheses: it ends at the line's last ')').
func procCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/PID/stat %.40q: no ')' closing the command name", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/PID/stat: %d fields after the command name, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/PID/stat: utime or stime %q: %w", s, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// schedulerCPU is kube-scheduler's CPU time so far (fleet.sh's pid file
// under dir).
func schedulerCPU(dir string) (time.Duration, error) { return processCPU(dir, "kube-scheduler") }

// processCPU is the CPU time so far of fleet.sh's process name (its pid
// file under dir: kube-apiserver, webhook-0, ...).
func processCPU(dir, name string) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(dir, "pids", name+".pid"))
	if err != nil {
		return 0, err
	}
	stat, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(b)), "stat"))
	if err != nil {
		return 0, err
	}
	return procCPU(string(stat))
}
