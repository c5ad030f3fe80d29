package counters

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ibkube/ibkube/hca/discovery"
)

// Port is one port's counters at one reading. A counter whose file is
// missing (an older kernel, a driver without hw_counters) is absent from
// the maps, never zero.
type Port struct {
	HCA  string `json:"hca"`
	Port int    `json:"port"`
	// Counters are the ports/<n>/counters values, raw (data in 4-octet units).
	Counters map[string]uint64 `json:"counters,omitempty"`
	// HW are the ports/<n>/hw_counters values.
	HW map[string]uint64 `json:"hwCounters,omitempty"`
	// Errors are files that exist but could not be read or parsed, by name.
	Errors map[string]string `json:"errors,omitempty"`
}

// Key names a port.
type Key struct {
	HCA  string
	Port int
}

// Key is the port's key.
func (p Port) Key() Key { return Key{p.HCA, p.Port} }

// maxCounterFile bounds one counter read: a decimal u64 and a newline.
const maxCounterFile = 64

// Reader reads port counters under a sysfs root.
type Reader struct {
	// SysfsRoot stands for /sys.
	SysfsRoot string
}

// Target is a port to read.
type Target struct {
	HCA  string
	Port int
}

// Read reads every counter of the given ports. A port without a counters
// directory yields a Port with empty maps; errors on single files land in
// Port.Errors, so one bad file does not hide the rest of the node.
func (r Reader) Read(targets []Target) []Port {
	out := make([]Port, 0, len(targets))
	for _, t := range targets {
		out = append(out, r.readPort(t))
	}
	return out
}

func (r Reader) readPort(t Target) Port {
	p := Port{HCA: t.HCA, Port: t.Port, Counters: make(map[string]uint64, len(portCounterNames))}
	dir := filepath.Join(r.SysfsRoot, "class", "infiniband", t.HCA, "ports", strconv.Itoa(t.Port))
	cdir := filepath.Join(dir, "counters")
	for _, name := range portCounterNames {
		v, err := readCounter(filepath.Join(cdir, name))
		switch {
		case err == nil:
			p.Counters[name] = v
		case errors.Is(err, fs.ErrNotExist):
		default:
			p.setErr(name, err)
		}
	}
	hdir := filepath.Join(dir, "hw_counters")
	entries, err := os.ReadDir(hdir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		p.setErr("hw_counters", err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		// lifespan is a tunable (the kernel's cache period in ms), not a counter.
		if e.Name() == "lifespan" {
			continue
		}
		v, err := readCounter(filepath.Join(hdir, e.Name()))
		if err != nil {
			p.setErr("hw_counters/"+e.Name(), err)
			continue
		}
		if p.HW == nil {
			p.HW = make(map[string]uint64, len(entries))
		}
		p.HW[e.Name()] = v
	}
	return p
}

func (p *Port) setErr(name string, err error) {
	if p.Errors == nil {
		p.Errors = map[string]string{}
	}
	p.Errors[name] = err.Error()
}

func readCounter(path string) (uint64, error) {
	b, err := discovery.ReadFile(path, maxCounterFile)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: want a decimal counter, got %q", path, s)
	}
	return v, nil
}
