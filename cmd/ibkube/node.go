package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/ibkube/ibkube/hca/discovery"
	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/node/agent"
	"github.com/ibkube/ibkube/node/counters"
	"github.com/ibkube/ibkube/node/dra/slice"
	"github.com/ibkube/ibkube/node/resource"
)

// runNode prints the node's HCAs as the agent sees them: which resource each
// feeds (or which selector excludes it), health and reason; or, with
// -o slices, the ResourceSlices the DRA agent would publish for them.
func runNode(ctx context.Context, args []string, s stdio) error {
	cmd := newHostCommand("node", s, []string{"table", "json", "slices"}, "output format: table, json, or slices (the resource.k8s.io/v1 ResourceSlices the agent publishes with --allocation=dra, as a YAML stream)")
	host, output := cmd.host, cmd.output
	nodeName := cmd.fs.String("node-name", os.Getenv("NODE_NAME"), "with -o slices: the Kubernetes node the slices are for (default $NODE_NAME, else the host name)")
	cfg, done, err := cmd.parse(args, func() (err error) {
		if *output == "slices" {
			*nodeName, err = sliceNodeName(*nodeName)
		}
		return err
	})
	if done {
		return err
	}
	if err := discovery.CheckSysfsRoot(*host.sysfsRoot); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	opts := discovery.Options{SysfsRoot: *host.sysfsRoot, DevRoot: *host.devRoot, Netlink: host.netlink(), Logger: logr.Discard()}
	node, err := discovery.NewScanner(opts).Scan(ctx)
	if err != nil {
		return fmt.Errorf("node: scan %s: %w", *host.sysfsRoot, err)
	}
	model := resource.Build(cfg, node, resource.Options{})
	if *output == "slices" {
		return printSlices(s.out, model, *nodeName, *host.sysfsRoot)
	}
	report := agent.Report(model)
	if len(report) == 0 {
		fmt.Fprintf(s.err, "no RDMA devices under %s (source: %s)\n", *host.sysfsRoot, dash(node.Source))
	}
	if *output == "json" {
		enc := json.NewEncoder(s.out)
		enc.SetIndent("", "  ")
		return enc.Encode(withCounters(report, gpuPartners(node), counters.Reader{SysfsRoot: *host.sysfsRoot}.Read(counters.Targets(node))))
	}
	if err := nodeTable(s.out, report, gpuPartners(node)); err != nil {
		return err
	}
	return partitionLine(s.out, agent.NodePartition(model))
}

// partitionLine closes the table with the node's partition: the key the
// agent labels the node with, or why there is none.
func partitionLine(w io.Writer, p inventory.Partition) error {
	var err error
	switch {
	case p.Known():
		_, err = fmt.Fprintf(w, "\nPartition: %s (%s)\n", p.Label(), p.State)
	case p.State == inventory.PartitionNoInfiniBand:
		_, err = fmt.Fprintf(w, "\nPartition: - (%s)\n", p.State)
	default:
		_, err = fmt.Fprintf(w, "\nPartition: - (%s: %s)\n", p.State, text(p.Reason))
	}
	return err
}

// printSlices writes the ResourceSlices the DRA agent would publish for the
// node, through the agent's own code (node/dra/slice), as a YAML stream.
func printSlices(w io.Writer, m *resource.Model, node, sysfsRoot string) error {
	for i, obj := range slice.Objects(slice.Slices(m, slice.NodeFacts{Name: node}), node) {
		data, err := yaml.Marshal(obj)
		if err != nil {
			return fmt.Errorf("node: encode ResourceSlice %d: %w", i, err)
		}
		if _, err := fmt.Fprintf(w, "---\n%s", data); err != nil {
			return err
		}
	}
	return nil
}

// sliceNodeName is the pool's node: the flag, else the host name, which
// must be a Kubernetes node name.
func sliceNodeName(flag string) (string, error) {
	node := flag
	if node == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("-o slices needs --node-name: %w", err)
		}
		node = h
	}
	if errs := validation.IsDNS1123Subdomain(node); len(errs) > 0 {
		return "", fmt.Errorf("--node-name %q: %s; want a Kubernetes node name", node, strings.Join(errs, "; "))
	}
	return node, nil
}

// nodeHCA is one HCA in `ibkube node -o json`: the agent's report plus
// its GPU partner by the machine's topology and each port's counters at
// this reading (raw sysfs values, data in 4-octet units; see
// docs/observability.md).
type nodeHCA struct {
	agent.HCAReport
	GPUPartner *inventory.GPUPartner `json:"gpuPartner,omitempty"`
	Counters   []counters.Port       `json:"counters"`
}

// gpuPartners indexes the HCAs' GPU partners by HCA name.
func gpuPartners(node inventory.Node) map[string]*inventory.GPUPartner {
	out := map[string]*inventory.GPUPartner{}
	for _, h := range node.HCAs {
		out[h.Name] = h.GPUPartner
	}
	return out
}

// gpuCell is the GPU column: the partner GPUs' PCI addresses and how near
// they are, "0000:0f:00.0(switch)"; "-" for none.
func gpuCell(p *inventory.GPUPartner) string {
	if p == nil {
		return "-"
	}
	return cell(strings.Join(p.GPUs, ",") + "(" + string(p.Affinity) + ")")
}

func withCounters(report []agent.HCAReport, partners map[string]*inventory.GPUPartner, ports []counters.Port) []nodeHCA {
	byHCA := map[string][]counters.Port{}
	for _, p := range ports {
		byHCA[p.HCA] = append(byHCA[p.HCA], p)
	}
	out := make([]nodeHCA, 0, len(report))
	for _, h := range report {
		cs := byHCA[h.Name]
		if cs == nil {
			cs = []counters.Port{}
		}
		out = append(out, nodeHCA{HCAReport: h, GPUPartner: partners[h.Name], Counters: cs})
	}
	return out
}

func nodeTable(w io.Writer, report []agent.HCAReport, partners map[string]*inventory.GPUPartner) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPCI\tNUMA\tGPU\tLINK\tPORTS\tNETDEVS\tPKEYS\tGID\tHEALTHY\tRESOURCE\tREASON")
	for _, h := range report {
		var ports, netdevs, pkeys, gids []string
		for _, p := range h.Ports {
			ports = append(ports, fmt.Sprintf("%d:%s/%s", p.Port, dash(p.State), dash(p.PhysState)))
			if p.Netdev != "" {
				netdevs = append(netdevs, p.Netdev)
			}
			if k := portPKeys(p); k != "" {
				pkeys = append(pkeys, fmt.Sprintf("%d:%s", p.Port, k))
			}
			if g := portGID(p); g != "" {
				gids = append(gids, fmt.Sprintf("%d:%s", p.Port, g))
			}
		}
		numa := strconv.Itoa(h.NUMANode)
		if h.NUMANode < 0 {
			numa = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%t\t%s\t%s\n", cell(h.Name), cell(h.PCIAddress), numa, gpuCell(partners[h.Name]), cell(h.LinkLayer),
			cell(strings.Join(ports, ",")), cell(strings.Join(netdevs, ",")), cell(strings.Join(pkeys, ",")), cell(strings.Join(gids, ",")), h.Healthy, cell(h.Resource), text(h.Reason))
	}
	return tw.Flush()
}

// portPKeys is a port's partition table in the PKEYS column: its used
// keys by index order, "0x800b/0x7fff", or "unreadable".
func portPKeys(p agent.PortReport) string {
	if p.PKeyError != "" {
		return "unreadable"
	}
	keys := make([]string, len(p.PKeys))
	for i, e := range p.PKeys {
		keys[i] = e.Key.String()
	}
	return strings.Join(keys, "/")
}

// portGID is a RoCE port's RoCE v2 IPv4 GID index in the GID column (the
// NCCL_IB_GID_INDEX its containers get), "none" when its table has no
// such entry, "unreadable"; "" for an InfiniBand port.
func portGID(p agent.PortReport) string {
	switch {
	case p.LinkLayer != inventory.LinkLayerEthernet:
		return ""
	case p.GIDError != "":
		return "unreadable"
	case p.RoCEv2IPv4GIDIndex == nil:
		return "none"
	}
	return strconv.Itoa(*p.RoCEv2IPv4GIDIndex)
}

// cell is one table column: names and addresses come from the tree being
// read, where a device or netdev name may hold spaces (which would shift the
// columns) or terminal escape sequences (which must not reach the
// terminal). Such a value is printed Go-quoted.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	for _, r := range s {
		if r == ' ' || r == utf8.RuneError || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// text is the reason column, free text with spaces: only characters that
// are not printable are escaped.
func text(s string) string {
	if s == "" {
		return "-"
	}
	var b strings.Builder
	for _, r := range s {
		if r != utf8.RuneError && unicode.IsPrint(r) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRune(r)
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
