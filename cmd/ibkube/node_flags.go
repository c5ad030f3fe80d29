package main

import (
	"flag"

	"github.com/ibkube/ibkube/hca/discovery"
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
