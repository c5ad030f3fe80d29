// Package plugin is the logic of ibkube-cni, a CNI plugin that finds the
// parent interface of a secondary network (an IPoIB or RoCE netdev) in the
// node's HCA inventory and delegates to the real plugin (ipoib, macvlan,
// ipvlan or host-device) with a generated config naming that interface. One
// NetworkAttachmentDefinition thus works on every node, whatever its
// interfaces are called. See docs/networks.md.
package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ibkube/ibkube/hca/inventory"
)

// PluginType is the plugin's CNI "type": the binary's name in the CNI bin dir.
const PluginType = "ibkube-cni"

// Defaults of the host paths in the config.
const (
	DefaultSysfsRoot = "/sys"
	DefaultDevRoot   = "/dev"
	// DefaultStateDir keeps the parent each attachment was given, so DEL and
	// CHECK use the same one even if the inventory changed since ADD.
	DefaultStateDir = "/var/lib/cni/ibkube"
)

// Delegates the plugin knows, with the config key that names the parent.
var parentKeys = map[string]string{
	"ipoib":       "master",
	"macvlan":     "master",
	"ipvlan":      "master",
	"host-device": "device",
}

// Keys of the plugin's own config; everything else at the top level is
// refused so a typo does not pass silently.
var ownKeys = map[string]bool{
	"cniVersion": true, "name": true, "type": true, "ipam": true, "dns": true,
	"parent": true, "delegate": true, "sysfsRoot": true, "devRoot": true, "stateDir": true,
	// Set by the runtime or Multus.
	"args": true, "runtimeConfig": true, "capabilities": true, "prevResult": true,
	// Multus sets deviceID and pciBusID (both the allocated device) when the
	// NAD has the k8s.v1.cni.cncf.io/resourceName annotation.
	"deviceID": true, "pciBusID": true, "cni.dev/valid-attachments": true,
}

// NetConf is the plugin's network config (what a NAD's spec.config holds).
type NetConf struct {
	CNIVersion string     `json:"cniVersion,omitempty"`
	Name       string     `json:"name"`
	Type       string     `json:"type"`
	Parent     ParentConf `json:"parent"`
	// Delegate is the real plugin's config without its parent key; "type"
	// is required. It is passed on as written.
	Delegate map[string]json.RawMessage `json:"delegate"`
	// IPAM, DNS are copied into the delegate config unless it has its own.
	IPAM json.RawMessage `json:"ipam,omitempty"`
	DNS  json.RawMessage `json:"dns,omitempty"`
	// SysfsRoot, DevRoot are where the plugin reads the inventory.
	SysfsRoot string `json:"sysfsRoot,omitempty"`
	DevRoot   string `json:"devRoot,omitempty"`
	StateDir  string `json:"stateDir,omitempty"`

	// Set by the runtime: Multus's allocated device, CNI args and runtime
	// config (capabilities), the previous result on CHECK.
	DeviceID      string          `json:"deviceID,omitempty"`
	Args          *Args           `json:"args,omitempty"`
	RuntimeConfig json.RawMessage `json:"runtimeConfig,omitempty"`
	PrevResult    json.RawMessage `json:"prevResult,omitempty"`
	Capabilities  json.RawMessage `json:"capabilities,omitempty"`

	// raw keeps "args" as written for the delegate.
	rawArgs json.RawMessage
}

// Args is the "args" convention (CNI CONVENTIONS.md): Multus puts a
// selection element's "cni-args" under args.cni.
type Args struct {
	CNI map[string]any `json:"cni,omitempty"`
}

// ConfigError is a network config the plugin refuses.
type ConfigError struct{ Msg string }

func (e *ConfigError) Error() string { return e.Msg }

func configErr(format string, a ...any) error {
	return &ConfigError{Msg: fmt.Sprintf(format, a...)}
}

// ParseConfig reads and validates the plugin's network config.
func ParseConfig(data []byte) (*NetConf, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, configErr("%s: network config is not a JSON object: %v", PluginType, err)
	}
	var unknown []string
	for k := range top {
		if !ownKeys[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, configErr("%s: unknown key(s) %s in the network config; accepted: cniVersion, name, type, parent, delegate, ipam, dns, sysfsRoot, devRoot, stateDir",
			PluginType, strings.Join(unknown, ", "))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var c NetConf
	if err := dec.Decode(&c); err != nil {
		return nil, configErr("%s: network config: %v", PluginType, err)
	}
	c.rawArgs = top["args"]
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *NetConf) validate() error {
	if c.Name == "" {
		return configErr(`%s: "name" is empty; it must be the network's name`, PluginType)
	}
	if c.CNIVersion == "" {
		return configErr(`%s: network %q has no "cniVersion"; accepted: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0`, PluginType, c.Name)
	}
	if c.Delegate == nil {
		return configErr(`%s: network %q has no "delegate"; accepted: an object with "type" one of %s and that plugin's options`,
			PluginType, c.Name, delegateTypes())
	}
	dt, err := c.DelegateType()
	if err != nil {
		return err
	}
	if key := parentKeys[dt]; key != "" {
		if _, set := c.Delegate[key]; set {
			return configErr(`%s: network %q: delegate.%s is chosen by %s from the node's HCA inventory; remove it and use "parent" to steer the choice`,
				PluginType, c.Name, key, PluginType)
		}
	}
	if err := c.validateParent(); err != nil {
		return err
	}
	if _, err := c.request(); err != nil {
		return err
	}
	return nil
}

// validateParent checks how the parent HCA is chosen: link layer, policy,
// index, netdev globs and selector.
func (c *NetConf) validateParent() error {
	switch c.Parent.LinkLayer {
	case "", inventory.LinkLayerInfiniBand, inventory.LinkLayerEthernet:
	default:
		return configErr("%s: network %q: parent.linkLayer %q; accepted: %s, %s", PluginType, c.Name,
			c.Parent.LinkLayer, inventory.LinkLayerInfiniBand, inventory.LinkLayerEthernet)
	}
	switch c.Parent.Policy {
	case "", PolicyAuto, PolicyAllocated, PolicyFirstActive, PolicyIndex:
	default:
		return configErr("%s: network %q: unknown parent.policy %q; accepted: %s", PluginType, c.Name,
			c.Parent.Policy, strings.Join(policies, ", "))
	}
	if c.Parent.Policy == PolicyIndex && c.Parent.Index == nil && c.argIndexRaw() == nil {
		return configErr(`%s: network %q: parent.policy "index" needs parent.index (0-based) or the "hcaIndex" CNI arg`, PluginType, c.Name)
	}
	if c.Parent.Index != nil && *c.Parent.Index < 0 {
		return configErr("%s: network %q: parent.index %d is negative", PluginType, c.Name, *c.Parent.Index)
	}
	for i, g := range c.Parent.Netdevs {
		if _, err := path.Match(g, ""); err != nil || g == "" {
			return configErr("%s: network %q: parent.netdevs[%d] %q is not a valid glob; accepted: a netdev name or a glob like rdma*", PluginType, c.Name, i, g)
		}
	}
	if c.Parent.Selector != nil {
		if err := c.Parent.Selector.Validate("parent.selector"); err != nil {
			return configErr("%s: network %q: %v", PluginType, c.Name, err)
		}
	}
	return nil
}

func delegateTypes() string {
	names := make([]string, 0, len(parentKeys))
	for k := range parentKeys {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// DelegateType is the delegate's "type".
func (c *NetConf) DelegateType() (string, error) {
	var dt string
	if raw, ok := c.Delegate["type"]; !ok || json.Unmarshal(raw, &dt) != nil || dt == "" {
		return "", configErr(`%s: network %q: delegate.type is missing or not a string; accepted: %s`, PluginType, c.Name, delegateTypes())
	}
	if _, ok := parentKeys[dt]; !ok {
		return "", configErr(`%s: network %q: delegate.type %q is not supported; accepted: %s`, PluginType, c.Name, dt, delegateTypes())
	}
	return dt, nil
}

// EffectiveParent is Parent with the link layer defaulted from the
// delegate: ipoib needs InfiniBand, macvlan and ipvlan Ethernet.
func (c *NetConf) EffectiveParent() ParentConf {
	p := c.Parent
	if p.LinkLayer == "" {
		dt, _ := c.DelegateType()
		switch dt {
		case "ipoib":
			p.LinkLayer = inventory.LinkLayerInfiniBand
		case "macvlan", "ipvlan":
			p.LinkLayer = inventory.LinkLayerEthernet
		}
	}
	return p
}

// CNI args the plugin reads (args.cni): hca overrides the allocated device,
// hcaIndex the index.
const (
	ArgHCA      = "hca"
	ArgHCAIndex = "hcaIndex"
)

func (c *NetConf) argIndexRaw() any {
	if c.Args == nil {
		return nil
	}
	return c.Args.CNI[ArgHCAIndex]
}

// request is what this attachment asks for beyond the config.
func (c *NetConf) request() (Request, error) {
	r := Request{DeviceID: c.DeviceID}
	if r.DeviceID == "" && len(c.RuntimeConfig) > 0 {
		// The deviceID capability, when the NAD declares it.
		var rc struct {
			DeviceID string `json:"deviceID"`
		}
		if json.Unmarshal(c.RuntimeConfig, &rc) == nil {
			r.DeviceID = rc.DeviceID
		}
	}
	if c.Args == nil {
		return r, nil
	}
	if v, ok := c.Args.CNI[ArgHCA]; ok {
		s, isStr := v.(string)
		if !isStr || s == "" {
			return r, configErr(`%s: network %q: CNI arg %q must be a non-empty string (an HCA name, PCI address or netdev), got %v`, PluginType, c.Name, ArgHCA, v)
		}
		r.DeviceID = s
	}
	if v := c.argIndexRaw(); v != nil {
		var n int
		var err error
		switch t := v.(type) {
		case float64:
			n = int(t)
			if float64(n) != t {
				err = fmt.Errorf("not an integer")
			}
		case string:
			n, err = strconv.Atoi(t)
		default:
			err = fmt.Errorf("not a number")
		}
		if err != nil || n < 0 {
			return r, configErr(`%s: network %q: CNI arg %q must be a non-negative integer, got %v`, PluginType, c.Name, ArgHCAIndex, v)
		}
		r.Index = &n
	}
	return r, nil
}

// DelegateConfig renders the delegate's network config for the resolved
// parent: the delegate object as written, plus cniVersion, name, the
// parent key, and the top-level ipam, dns, args and runtimeConfig unless
// the delegate sets its own. prevResult is added for CHECK.
func (c *NetConf) DelegateConfig(parent Parent, withPrevResult bool) ([]byte, error) {
	dt, err := c.DelegateType()
	if err != nil {
		return nil, err
	}
	out := make(map[string]json.RawMessage, len(c.Delegate)+6)
	for k, v := range c.Delegate {
		out[k] = v
	}
	str := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	out["cniVersion"] = str(c.CNIVersion)
	if _, ok := out["name"]; !ok {
		out["name"] = str(c.Name)
	}
	out[parentKeys[dt]] = str(parent.Netdev)
	for k, v := range map[string]json.RawMessage{
		"ipam": c.IPAM, "dns": c.DNS, "args": c.rawArgs, "runtimeConfig": c.RuntimeConfig,
	} {
		if _, ok := out[k]; !ok && len(v) > 0 {
			out[k] = v
		}
	}
	if _, ok := out["ipam"]; !ok && dt == "ipoib" {
		// ipoib-cni requires "ipam"; an empty object means no address.
		out["ipam"] = json.RawMessage(`{}`)
	}
	if withPrevResult && len(c.PrevResult) > 0 {
		out["prevResult"] = c.PrevResult
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("render delegate config: %w", err)
	}
	return b, nil
}

// cniError turns an error into the CNI error the runtime shows the user.
func cniError(err error, network string) *types.Error {
	if err == nil {
		return nil
	}
	if te, ok := err.(*types.Error); ok {
		return te
	}
	switch e := err.(type) {
	case *ConfigError:
		return types.NewError(types.ErrInvalidNetworkConfig, e.Msg, "")
	case *ResolveError:
		code := types.ErrInvalidNetworkConfig
		if e.Transient {
			code = types.ErrTryAgainLater
		}
		return types.NewError(code, fmt.Sprintf("%s: network %q: %s", PluginType, network, e.Msg), "")
	}
	return types.NewError(types.ErrInternal, fmt.Sprintf("%s: network %q: %v", PluginType, network, err), "")
}
