package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/internal/cmdline"
	"github.com/ibkube/ibkube/node/config"
)

// hostFlags are the flags `ibkube node` and `ibkube doctor` share: where to
// read the node, and the agent's config file, spelled as the agent spells them.
type hostFlags struct {
	sysfsRoot, devRoot, config *string
}

// hostCommand is the command line of `ibkube node` and `ibkube doctor`:
// the host flags, then -o, one of formats (the first is the default).
type hostCommand struct {
	name    string
	fs      *flag.FlagSet
	host    hostFlags
	output  *string
	formats []string
}

func newHostCommand(name string, s stdio, formats []string, outputHelp string) hostCommand {
	fs := cmdline.NewFlagSet("ibkube "+name, s.err)
	return hostCommand{name: name, fs: fs, host: addHostFlags(fs), output: fs.String("o", formats[0], outputHelp), formats: formats}
}

// parse reads args (see parse in main.go): no positional arguments, -o one
// of the formats, then check on the rest; then the agent's config file that
// --config names, as the agent would load it.
func (c hostCommand) parse(args []string, check func() error) (cfg *config.AgentConfig, done bool, err error) {
	done, err = parse(c.name, c.fs, args, func() error {
		if err := cmdline.NoArgs(c.fs); err != nil {
			return err
		}
		if !slices.Contains(c.formats, *c.output) {
			return fmt.Errorf("-o %q: accepted: %s", *c.output, strings.Join(c.formats, ", "))
		}
		return check()
	})
	if done {
		return nil, done, err
	}
	if cfg, err = config.Load(*c.host.config); err != nil {
		return nil, true, fmt.Errorf("%s: %w", c.name, err)
	}
	return cfg, false, nil
}

func addHostFlags(fs *flag.FlagSet) hostFlags {
	return hostFlags{
		sysfsRoot: fs.String("sysfs-root", "/sys", "directory that stands for /sys"),
		devRoot:   fs.String("dev-root", "/dev", "directory that stands for /dev"),
		config:    fs.String("config", "/etc/ibkube/agent.yaml", "the agent's AgentConfig file, for the pools it would advertise (missing: the agent's defaults)"),
	}
}

// netlink lists RDMA devices over netlink only when the node read is this
// host's own /sys; a fake tree is read from sysfs alone.
func (h hostFlags) netlink() discovery.Netlink {
	if *h.sysfsRoot == "/sys" {
		return discovery.SystemNetlink{}
	}
	return nil
}
