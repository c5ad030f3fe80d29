package main

import (
	"flag"
	"fmt"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/internal/cmdline"
)

// hostFlags are the flags `ibkube node` and `ibkube doctor` share: where to
// read the node, and the agent's config file, spelled as the agent spells them.
type hostFlags struct {
	sysfsRoot, devRoot, config *string
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

// parseSubcommand parses args into fs for the subcommand name and refuses
// positional arguments. done is true when the subcommand must stop: after
// -h (fs has printed its usage, err is nil) or on a bad command line.
func parseSubcommand(fs *flag.FlagSet, args []string, name string) (done bool, err error) {
	help, err := cmdline.Parse(fs, args, func() error {
		if fs.NArg() > 0 {
			return fmt.Errorf("unexpected arguments %q", fs.Args())
		}
		return nil
	})
	if err != nil {
		return true, fmt.Errorf("%s: %w", name, err)
	}
	return help, nil
}
