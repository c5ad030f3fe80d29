// Package nad renders the NetworkAttachmentDefinitions ibkube ships: the
// IPoIB network every ipoib-mode pod joins, and optional per-HCA networks
// (RDMA CM over RoCE or IPoIB, one per rail) for the rdma modes. Each is an
// ibkube-cni config, so one object works on every node whatever its
// interfaces are called. The chart renders the same JSON from its values;
// the golden files under testdata/ are the contract (docs/networks.md).
package nad

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"math/bits"
	"net/netip"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ibkube/ibkube/cni/multus"
	"github.com/ibkube/ibkube/cni/plugin"
	"github.com/ibkube/ibkube/hca/inventory"
)

// Names and defaults.
const (
	// DefaultIPoIBName is the default IPoIB network (contracts: <release namespace>/ibkube-ipoib).
	DefaultIPoIBName = "ibkube-ipoib"
	// DefaultIPoIBRange is the default whereabouts range of the IPoIB
	// network (the AKS guide's; the chart's networks.ipoib.ipam.range).
	DefaultIPoIBRange = "192.168.0.0/16"
	// DefaultCNIVersion is the CNI version of the rendered configs.
	DefaultCNIVersion = "1.0.0"
	// ResourceNameAnnotation makes Multus pass the device the pod was
	// allocated from that resource as "deviceID" (and lets
	// network-resources-injector add the resource request).
	ResourceNameAnnotation = "k8s.v1.cni.cncf.io/resourceName"
)

// Reservation is an address range a pod network must not overlap.
type Reservation struct {
	CIDR, Why string
}

// Reserved ranges the IPAM range is checked against.
var Reserved = []Reservation{
	{"172.16.0.0/16", "Azure reserves it for the RDMA network of InfiniBand VM sizes"},
	{"169.254.0.0/16", "link-local (Azure IMDS 169.254.169.254)"},
	{"168.63.129.16/32", "Azure platform address (DNS, DHCP, health probes)"},
	{"127.0.0.0/8", "loopback"},
	{"224.0.0.0/4", "multicast"},
}

// IPAM is the network's address management. Type whereabouts (the default)
// takes Range and the optional fields; Type "none" renders no ipam; Raw,
// when set, is used verbatim.
type IPAM struct {
	Type       string          `json:"type,omitempty"`
	Range      string          `json:"range,omitempty"`
	RangeStart string          `json:"range_start,omitempty"`
	RangeEnd   string          `json:"range_end,omitempty"`
	Exclude    []string        `json:"exclude,omitempty"`
	Raw        json.RawMessage `json:"-"`
}

// Network describes one NetworkAttachmentDefinition.
type Network struct {
	Name, Namespace string
	CNIVersion      string // default DefaultCNIVersion
	// Delegate is ipoib, macvlan, ipvlan or host-device.
	Delegate string
	// DelegateOptions are the delegate's own options (mode, mtu, pkey...).
	DelegateOptions map[string]any
	Parent          plugin.ParentConf
	IPAM            IPAM
	// ResourceName, when set, becomes the k8s.v1.cni.cncf.io/resourceName
	// annotation (e.g. rdma/ib for the exclusive pool).
	ResourceName string
	Labels       map[string]string
}

// IPoIB is the default IPoIB network in namespace: ibkube-cni picking the
// allocated HCA's IPoIB netdev, else the first ACTIVE one, delegating to
// the ipoib plugin, with whereabouts over ipRange.
func IPoIB(namespace, ipRange string) Network {
	return Network{
		Name: DefaultIPoIBName, Namespace: namespace, Delegate: "ipoib",
		Parent: plugin.ParentConf{Policy: plugin.PolicyAuto, LinkLayer: inventory.LinkLayerInfiniBand},
		IPAM:   IPAM{Type: "whereabouts", Range: ipRange},
	}
}

type config struct {
	CNIVersion string            `json:"cniVersion"`
	Name       string            `json:"name"`
	Type       string            `json:"type"`
	Parent     plugin.ParentConf `json:"parent"`
	Delegate   map[string]any    `json:"delegate"`
	IPAM       json.RawMessage   `json:"ipam,omitempty"`
}

// Config renders the network's CNI config (spec.config), indented with two
// spaces, and checks it parses as an ibkube-cni config.
func Config(n Network) (string, error) {
	if n.Name == "" {
		return "", fmt.Errorf("network name is empty")
	}
	c := config{
		CNIVersion: n.CNIVersion, Name: n.Name, Type: plugin.PluginType, Parent: n.Parent,
		Delegate: map[string]any{},
	}
	if c.CNIVersion == "" {
		c.CNIVersion = DefaultCNIVersion
	}
	for k, v := range n.DelegateOptions {
		c.Delegate[k] = v
	}
	c.Delegate["type"] = n.Delegate
	ipam, err := renderIPAM(n.IPAM)
	if err != nil {
		return "", fmt.Errorf("network %s: %w", n.Name, err)
	}
	c.IPAM = ipam
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(c); err != nil {
		return "", fmt.Errorf("network %s: %w", n.Name, err)
	}
	if _, err := plugin.ParseConfig(buf.Bytes()); err != nil {
		return "", fmt.Errorf("network %s: %w", n.Name, err)
	}
	return buf.String(), nil
}

func renderIPAM(i IPAM) (json.RawMessage, error) {
	if len(i.Raw) > 0 {
		if !json.Valid(i.Raw) {
			return nil, fmt.Errorf("ipam: raw config is not valid JSON")
		}
		return i.Raw, nil
	}
	switch i.Type {
	case "none":
		return nil, nil
	case "", "whereabouts":
		i.Type = "whereabouts"
	default:
		return nil, fmt.Errorf("ipam.type %q: accepted: whereabouts, none (or a raw ipam config)", i.Type)
	}
	if err := CheckRange(i.Range); err != nil {
		return nil, fmt.Errorf("ipam.range: %w", err)
	}
	for k, ex := range i.Exclude {
		if _, err := netip.ParsePrefix(ex); err != nil {
			return nil, fmt.Errorf("ipam.exclude[%d] %q is not a CIDR", k, ex)
		}
	}
	return json.Marshal(i)
}

// CheckRange checks an IPAM range: a CIDR (IPv4 or IPv6) that overlaps
// none of the Reserved ranges.
func CheckRange(cidr string) error {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return fmt.Errorf("%q is not a CIDR (e.g. %s)", cidr, DefaultIPoIBRange)
	}
	if p.Masked() != p {
		return fmt.Errorf("%q has host bits set; did you mean %s?", cidr, p.Masked())
	}
	for _, r := range Reserved {
		rp := netip.MustParsePrefix(r.CIDR)
		if rp.Overlaps(p) {
			return fmt.Errorf("%s overlaps %s: %s; choose a range unused by the cluster's pod, service and VNet ranges (e.g. %s)",
				cidr, r.CIDR, r.Why, DefaultIPoIBRange)
		}
	}
	return nil
}

// Render builds the NetworkAttachmentDefinition object.
func Render(n Network) (*nadv1.NetworkAttachmentDefinition, error) {
	cfg, err := Config(n)
	if err != nil {
		return nil, err
	}
	obj := &nadv1.NetworkAttachmentDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "k8s.cni.cncf.io/v1", Kind: "NetworkAttachmentDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Namespace: n.Namespace},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: cfg},
	}
	if len(n.Labels) > 0 {
		obj.Labels = map[string]string{}
		for k, v := range n.Labels {
			obj.Labels[k] = v
		}
	}
	if n.ResourceName != "" {
		obj.Annotations = map[string]string{ResourceNameAnnotation: n.ResourceName}
	}
	return obj, nil
}

// PerHCA expands base into count networks, one per candidate port in the
// HCA-aligned order (PCI address order): <name>-0 … <name>-<count-1>, each
// with the index policy. base.IPAM.Range is split into equal subnets, one
// per network (rail), so no two rails share a subnet.
func PerHCA(base Network, count int) ([]Network, error) {
	if count < 1 || count > 64 {
		return nil, fmt.Errorf("per-HCA network count %d: accepted 1..64", count)
	}
	var ranges []string
	if base.IPAM.Raw == nil && base.IPAM.Type != "none" {
		var err error
		if ranges, err = SplitRange(base.IPAM.Range, count); err != nil {
			return nil, fmt.Errorf("network %s: ipam.range: %w", base.Name, err)
		}
	}
	out := make([]Network, count)
	for i := range out {
		n := base
		n.Name = fmt.Sprintf("%s-%d", base.Name, i)
		n.Parent.Policy = plugin.PolicyIndex
		idx := i
		n.Parent.Index = &idx
		if ranges != nil {
			n.IPAM.Range = ranges[i]
		}
		out[i] = n
	}
	return out, nil
}

// SplitRange splits cidr into the first n of its 2^k equal subnets, the
// smallest k with 2^k >= n.
func SplitRange(cidr string, n int) ([]string, error) {
	if err := CheckRange(cidr); err != nil {
		return nil, err
	}
	p := netip.MustParsePrefix(cidr)
	if n < 1 {
		return nil, fmt.Errorf("cannot split into %d ranges", n)
	}
	k := bits.Len(uint(n - 1))
	newBits := p.Bits() + k
	maxBits := p.Addr().BitLen()
	if newBits > maxBits-2 {
		return nil, fmt.Errorf("%s is too small for %d subnets", cidr, n)
	}
	shift := uint(maxBits - newBits)
	base := new(big.Int).SetBytes(p.Addr().AsSlice())
	out := make([]string, n)
	for i := 0; i < n; i++ {
		v := new(big.Int).Add(base, new(big.Int).Lsh(big.NewInt(int64(i)), shift))
		buf := make([]byte, maxBits/8)
		v.FillBytes(buf)
		addr, _ := netip.AddrFromSlice(buf)
		out[i] = netip.PrefixFrom(addr, newBits).String()
	}
	return out, nil
}

// Attachments are the Multus selections of the per-HCA networks, in
// HCA-aligned order: namespace/base-i@<ifPrefix><i>, i = 0..count-1.
// Pass them to multus.Merge.
func Attachments(namespace, base string, count int, ifPrefix string) []multus.Network {
	out := make([]multus.Network, count)
	for i := range out {
		out[i] = multus.Network{Namespace: namespace, Name: fmt.Sprintf("%s-%d", base, i), Interface: fmt.Sprintf("%s%d", ifPrefix, i)}
	}
	return out
}
