// Command ibkube-cni is a CNI plugin that resolves a secondary network's
// parent interface (IPoIB or RoCE netdev) from the node's HCA inventory and
// delegates to ipoib, macvlan, ipvlan or host-device. See docs/networks.md.
//
// Run by a container runtime (CNI_COMMAND set) it is the plugin.
// `ibkube-cni install DIR` copies the binary into DIR (the host's CNI bin
// dir, mounted into the node agent's init container).
package main

import (
	"fmt"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ibkube/ibkube/cni/install"
	"github.com/ibkube/ibkube/cni/plugin"
	"github.com/ibkube/ibkube/hca/discovery"
	ibversion "github.com/ibkube/ibkube/internal/version"
)

func main() {
	if os.Getenv("CNI_COMMAND") == "" && len(os.Args) > 1 {
		if err := runInstall(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "ibkube-cni:", err)
			os.Exit(1)
		}
		return
	}
	p := plugin.New(plugin.Options{
		NewScanner: func(sysfsRoot, devRoot string) plugin.Scanner {
			// sysfs only: the plugin runs once per attachment and needs no
			// RDMA netlink or link events.
			return discovery.NewScanner(discovery.Options{SysfsRoot: sysfsRoot, DevRoot: devRoot})
		},
	})
	skel.PluginMainFuncs(p.Funcs(), version.All, "ibkube-cni "+ibversion.Version)
}

func runInstall(args []string) error {
	if len(args) != 2 || args[0] != "install" {
		return fmt.Errorf("usage: ibkube-cni install <cni-bin-dir> (as a CNI plugin it needs CNI_COMMAND)")
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	changed, err := install.Binary(self, args[1], plugin.PluginType)
	if err != nil {
		return err
	}
	fmt.Printf("ibkube-cni %s installed in %s (changed: %v)\n", ibversion.Version, args[1], changed)
	return nil
}
