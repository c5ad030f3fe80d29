package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ibkube/ibkube/internal/atomicfile"
	"github.com/ibkube/ibkube/nccl/machine"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/node/resource"
)

// InstanceTypeLabel is the well-known label carrying the VM size.
const InstanceTypeLabel = "node.kubernetes.io/instance-type"

// SKU sources, as logged and reported.
const (
	SKUFromConfig = "config"
	SKUFromLabel  = "node label " + InstanceTypeLabel
	SKUFromDMI    = "DMI product name"
)

// ResolveSKU picks the node's instance type: the config's profile override
// when set (an operator's explicit choice wins), else the Node's
// instance-type label (an Azure VM's DMI product name is just "Virtual
// Machine"), else the DMI product name. It returns "" when none is known or
// the override is "none".
func ResolveSKU(override, label, dmi string) (sku, source string) {
	switch {
	case override == config.ProfileNone:
		return "", SKUFromConfig
	case override != "":
		return override, SKUFromConfig
	case label != "":
		return label, SKUFromLabel
	case dmi != "":
		return dmi, SKUFromDMI
	}
	return "", ""
}

// DMIProductName reads <sysfs>/class/dmi/id/product_name ("" if absent).
func DMIProductName(sysfsRoot string) string {
	b, err := os.ReadFile(filepath.Join(sysfsRoot, "class", "dmi", "id", "product_name"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// NodeLabels reads the labels of a Node; the binary implements it with its
// API client.
type NodeLabels interface {
	NodeLabels(ctx context.Context, name string) (map[string]string, error)
}

// instanceType is the instance-type label of the Node named nodeName.
func instanceType(ctx context.Context, nodes NodeLabels, nodeName string) (string, error) {
	if nodeName == "" {
		return "", errors.New("no node name (--node-name or $NODE_NAME)")
	}
	labels, err := nodes.NodeLabels(ctx, nodeName)
	if err != nil {
		return "", err
	}
	return labels[InstanceTypeLabel], nil
}

// NodeProfile turns the catalogue's facts for sku into what the resource
// model hands out: the profile's name and its topology file written under
// stateDir (rewritten only when its content differs). The agent reads the
// catalogue through nccl/machine only, which has no tunings (see there). ok
// is false when the catalogue has no profile for sku.
func NodeProfile(sku, stateDir string) (p resource.Profile, ok bool, err error) {
	facts, found := machine.ForSKU(sku)
	if !found {
		return resource.Profile{}, false, nil
	}
	p.Name = facts.Profile
	topology := facts.TopologyFile
	if topology == "" {
		return p, true, nil
	}
	data, err := machine.Topology(topology)
	if err != nil {
		return p, true, err
	}
	path := filepath.Join(stateDir, "nccl", topology)
	if err := writeIfChanged(path, data); err != nil {
		return p, true, fmt.Errorf("write NCCL topology: %w", err)
	}
	p.TopologyFile = path
	return p, true, nil
}

func writeIfChanged(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o644)
}
