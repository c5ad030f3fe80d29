package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/ibkube/ibkube/hca/inventory"
)

// readPorts reads every numbered entry of the device's ports/ directory, in
// port order.
func (r *hcaRead) readPorts(netdevs map[int]string) {
	portDirs, err := os.ReadDir(filepath.Join(r.dir, "ports"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.problem("no ports in sysfs")
	case err != nil:
		r.problem("cannot list ports: %s", cause(err))
	}
	for _, pd := range portDirs {
		n, err := strconv.Atoi(pd.Name())
		if err != nil || n < 1 {
			continue
		}
		p, err := readPort(filepath.Join(r.dir, "ports", pd.Name()), n)
		if err != nil {
			r.problems = append(r.problems, err.Error())
		}
		if p.Netdev == "" {
			p.Netdev = netdevs[n]
		}
		r.h.Ports = append(r.h.Ports, p)
	}
	sort.Slice(r.h.Ports, func(i, j int) bool { return r.h.Ports[i].Number < r.h.Ports[j].Number })
}

// portStep reads one part of a port from its sysfs directory into p. An
// error makes the HCA unhealthy; an optional attribute that is absent is
// no error.
type portStep func(dir string, p *inventory.Port) error

// portSteps are the reads of one port, in order. A new port attribute is a
// new step here (in its own file when it is more than a few lines).
func portSteps() []portStep {
	return []portStep{
		readPortState,
		readPortLinkLayer,
		readPortRate,
		readPortGUID,
		readPortRoCENetdev,
		readPortPKeys,
		readPortGIDs,
	}
}

// readPort reads port n from dir, running every step and joining their
// errors.
func readPort(dir string, n int) (inventory.Port, error) {
	p := inventory.Port{Number: n}
	var errs []string
	for _, step := range portSteps() {
		if err := step(dir, &p); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return p, fmt.Errorf("port %d: %s", n, strings.Join(errs, ", "))
	}
	return p, nil
}

// readPortState reads state and phys_state, which health needs.
func readPortState(dir string, p *inventory.Port) error {
	var errs []string
	p.State = readNumberedState(dir, "state", &errs)
	p.PhysState = readNumberedState(dir, "phys_state", &errs)
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, ", "))
	}
	return nil
}

func readPortLinkLayer(dir string, p *inventory.Port) error {
	if v, err := readAttr(filepath.Join(dir, "link_layer")); err == nil {
		p.LinkLayer = v
	}
	return nil
}

func readPortRate(dir string, p *inventory.Port) error {
	if v, err := readAttr(filepath.Join(dir, "rate")); err == nil {
		if r, err := ParseRate(v); err == nil {
			p.Rate = r.String()
		} else {
			p.Rate = v
		}
	}
	return nil
}

// readPortGUID takes an InfiniBand port's GUID from its first GID, whose
// interface id it is.
func readPortGUID(dir string, p *inventory.Port) error {
	if p.LinkLayer != inventory.LinkLayerInfiniBand {
		return nil
	}
	if v, err := readAttr(filepath.Join(dir, "gids", "0")); err == nil {
		if gid, err := ParseGID(v); err == nil {
			p.GUID = PortGUIDFromGID(gid)
		}
	}
	return nil
}

// readPortRoCENetdev: on RoCE the GID table names the netdev of the port
// itself, which beats the PCI function's net/ directory.
func readPortRoCENetdev(dir string, p *inventory.Port) error {
	if v, err := readAttr(filepath.Join(dir, "gid_attrs", "ndevs", "0")); err == nil && v != "" {
		p.Netdev = v
	}
	return nil
}

// readNumberedState returns the name in the port attribute attr ("4: ACTIVE"
// gives ACTIVE). An attribute it cannot read or parse adds its reason to
// errs and gives "".
func readNumberedState(dir, attr string, errs *[]string) string {
	v, err := readAttr(filepath.Join(dir, attr))
	if err != nil {
		*errs = append(*errs, "cannot read "+attr+": "+cause(err))
		return ""
	}
	_, name, err := ParseNumberedState(v)
	if err != nil {
		*errs = append(*errs, err.Error())
		return ""
	}
	return name
}
