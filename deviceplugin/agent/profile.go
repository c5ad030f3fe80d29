package agent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ibkube/ibkube/deviceplugin/config"
	"github.com/ibkube/ibkube/deviceplugin/resource"
	"github.com/ibkube/ibkube/nccl"
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

// InstanceTypeFromAPI returns a lookup of the instance-type label of the Node
// named nodeName, through the in-cluster API configuration.
func InstanceTypeFromAPI(nodeName string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		if nodeName == "" {
			return "", fmt.Errorf("no node name (--node-name or $NODE_NAME)")
		}
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return "", fmt.Errorf("in-cluster config: %w", err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return "", fmt.Errorf("client: %w", err)
		}
		n, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("get node %s: %w", nodeName, err)
		}
		return n.Labels[InstanceTypeLabel], nil
	}
}

// NodeProfile turns the catalogue's profile for sku into the resource
// model's: its NCCL and other variables, and its topology file written under
// stateDir (rewritten only when its content differs). ok is false when the
// catalogue has no profile for sku.
func NodeProfile(sku, stateDir string) (p resource.Profile, ok bool, err error) {
	np, found := nccl.ProfileForSKU(sku)
	if sku == "" || !found {
		return resource.Profile{}, false, nil
	}
	p.Name = np.Name
	for _, v := range append(append([]nccl.Var{}, np.NCCL...), np.Env...) {
		p.Env = append(p.Env, resource.Var{Name: v.Name, Value: v.Value})
	}
	if np.TopologyFile == "" {
		return p, true, nil
	}
	data, err := nccl.Topology(np.TopologyFile)
	if err != nil {
		return p, true, err
	}
	path := filepath.Join(stateDir, "nccl", np.TopologyFile)
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
	tmp, err := os.CreateTemp(filepath.Dir(path), ".topo-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
