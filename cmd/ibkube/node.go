package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/go-logr/logr"

	"github.com/ibkube/ibkube/deviceplugin/agent"
	"github.com/ibkube/ibkube/deviceplugin/config"
	"github.com/ibkube/ibkube/deviceplugin/discovery"
	"github.com/ibkube/ibkube/deviceplugin/resource"
)

// runNode prints the node's HCAs as the agent sees them: which resource each
// feeds (or which selector excludes it), health and reason.
func runNode(ctx context.Context, args []string, s stdio) error {
	fs := flag.NewFlagSet("ibkube node", flag.ContinueOnError)
	fs.SetOutput(s.err)
	host := addHostFlags(fs)
	output := fs.String("o", "table", "output format: table or json")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("node: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("node: unexpected arguments %q", fs.Args())
	}
	if *output != "table" && *output != "json" {
		return fmt.Errorf("node: -o %q: want table or json", *output)
	}
	cfg, err := config.Load(*host.config)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	opts := discovery.Options{SysfsRoot: *host.sysfsRoot, DevRoot: *host.devRoot, Netlink: host.netlink(), Logger: logr.Discard()}
	node, err := discovery.NewScanner(opts).Scan(ctx)
	if err != nil {
		return fmt.Errorf("node: scan %s: %w", *host.sysfsRoot, err)
	}
	report := agent.Report(resource.Build(cfg, node, resource.Options{}))
	if len(report) == 0 {
		fmt.Fprintf(s.err, "no RDMA devices under %s (source: %s)\n", *host.sysfsRoot, dash(node.Source))
	}
	if *output == "json" {
		enc := json.NewEncoder(s.out)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	return nodeTable(s.out, report)
}

func nodeTable(w io.Writer, report []agent.HCAReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPCI\tNUMA\tLINK\tPORTS\tNETDEVS\tHEALTHY\tRESOURCE\tREASON")
	for _, h := range report {
		var ports, netdevs []string
		for _, p := range h.Ports {
			ports = append(ports, fmt.Sprintf("%d:%s/%s", p.Port, p.State, p.PhysState))
			if p.Netdev != "" {
				netdevs = append(netdevs, p.Netdev)
			}
		}
		numa := strconv.Itoa(h.NUMANode)
		if h.NUMANode < 0 {
			numa = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%t\t%s\t%s\n", h.Name, dash(h.PCIAddress), numa, dash(h.LinkLayer),
			dash(strings.Join(ports, ",")), dash(strings.Join(netdevs, ",")), h.Healthy, dash(h.Resource), dash(h.Reason))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
