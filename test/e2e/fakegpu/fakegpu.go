// Package fakegpu is a test-only DRA driver standing in for a GPU driver on
// the e2e node: it publishes the eight GPUs of an Azure ND H100 v5 with the
// standard attributes resource.kubernetes.io/pciBusID and
// resource.kubernetes.io/numaNode placed as azhpc-images' ndv5 topology
// places them (the same facts as the node's HCA fixture), and prepares a
// claim with a CDI spec that only sets one environment variable per GPU.
// FromInventory is the bare-metal layout beside it: a host's GPUs as
// discovery reads them (the oci-h100 fixture's share PCIe roots with its
// ports), publishing resource.kubernetes.io/pcieRoot.
//
// That is all the scheduler needs to align GPUs with HCAs by NUMA node
// (a ResourceClaimTemplate with matchAttribute resource.kubernetes.io/numaNode)
// and all a test needs to read back which GPUs a container got, without a GPU.
// The e2e harness runs it in its own process on the node's host.
package fakegpu

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/hca/inventory"
)

const (
	// DriverName is the fake driver's name in ResourceSlices and claims.
	DriverName = "gpu.e2e.ibkube.io"
	// DeviceClass selects every device of the fake driver.
	DeviceClass = "ibkube-e2e-gpu"
	// EnvPrefix names the variable each prepared GPU sets in the container:
	// FAKE_GPU_<index>=<PCI bus ID>.
	EnvPrefix = "FAKE_GPU_"
	// CDIKind is the CDI vendor/class of the devices the driver prepares.
	CDIKind = "e2e.ibkube.io/gpu"

	numaNodeAttr = resourceapi.QualifiedName("resource.kubernetes.io/numaNode")
	pciBusIDAttr = resourceapi.QualifiedName("resource.kubernetes.io/pciBusID")
	pcieRootAttr = resourceapi.QualifiedName("resource.kubernetes.io/pcieRoot")
	indexAttr    = resourceapi.QualifiedName("index")
	// pciClassGPU is the PCI class an NCCL topology gives a GPU (3D
	// controller, 0x0302).
	pciClassGPU = "0x0302"
)

// GPU is one fake GPU.
type GPU struct {
	Index    int
	PCIBusID string
	// NUMANode is published as resource.kubernetes.io/numaNode; below 0,
	// not published (NVIDIA's DRA driver publishes none).
	NUMANode int64
	// PCIeRoot is published as resource.kubernetes.io/pcieRoot; "", not
	// published (an Azure VM's GPUs, each on a root of its own, give none
	// that an HCA could share).
	PCIeRoot string
}

// Name is the device name in the ResourceSlice.
func (g GPU) Name() string { return fmt.Sprintf("gpu-%d", g.Index) }

// Env is the variable the prepared GPU sets in a container.
func (g GPU) Env() string { return fmt.Sprintf("%s%d=%s", EnvPrefix, g.Index, g.PCIBusID) }

// GPUs reads the GPUs of an NCCL topology XML (nccl.Topology): every pci
// element of class 0x0302 under a cpu element, with that cpu's numaid as its
// NUMA node. They are numbered in PCI bus ID order, as CUDA_DEVICE_ORDER=PCI_BUS_ID
// numbers them.
func GPUs(topology []byte) ([]GPU, error) {
	dec := xml.NewDecoder(bytes.NewReader(topology))
	var out []GPU
	numa := int64(-1)
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read topology: %w", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			switch el.Name.Local {
			case "cpu":
				v := attr(el, "numaid")
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("topology: cpu numaid %q is not a NUMA node number", v)
				}
				numa = n
			case "pci":
				if strings.HasPrefix(attr(el, "class"), pciClassGPU) {
					if numa < 0 {
						return nil, fmt.Errorf("topology: GPU %s is under no cpu element, so it has no NUMA node", attr(el, "busid"))
					}
					out = append(out, GPU{PCIBusID: attr(el, "busid"), NUMANode: numa})
				}
			}
		case xml.EndElement:
			if el.Name.Local == "cpu" {
				numa = -1
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("topology has no GPU (pci class %s)", pciClassGPU)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PCIBusID < out[j].PCIBusID })
	for i := range out {
		out[i].Index = i
	}
	return out, nil
}

func attr(el xml.StartElement, name string) string {
	for _, a := range el.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// Devices are the GPUs as ResourceSlice devices.
func Devices(gpus []GPU) []resourceapi.Device {
	out := make([]resourceapi.Device, 0, len(gpus))
	for _, g := range gpus {
		attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			pciBusIDAttr: {StringValue: ptr.To(g.PCIBusID)},
			indexAttr:    {IntValue: ptr.To(int64(g.Index))},
		}
		if g.NUMANode >= 0 {
			attrs[numaNodeAttr] = resourceapi.DeviceAttribute{IntValue: ptr.To(g.NUMANode)}
		}
		if g.PCIeRoot != "" {
			attrs[pcieRootAttr] = resourceapi.DeviceAttribute{StringValue: ptr.To(g.PCIeRoot)}
		}
		out = append(out, resourceapi.Device{Name: g.Name(), Attributes: attrs})
	}
	return out
}

// FromInventory are the GPUs of a bare-metal host as discovery reads them
// from its PCI tree (inventory.Node.GPUs, in PCI bus ID order), each
// publishing its PCIe root and, withNUMA, its NUMA node; withNUMA false
// leaves numaNode out, as NVIDIA's DRA driver does. On the oci-h100
// fixture (an OCI BM.GPU.H100.8, hca/fixture/internal/hosts ociGPUs) each
// GPU sits behind the PCIe switch of one dual-port ConnectX-7, so on a
// root complex that carries two of its GPU-fabric ports.
func FromInventory(gpus []inventory.GPU, withNUMA bool) []GPU {
	out := make([]GPU, 0, len(gpus))
	for i, g := range gpus {
		numa := int64(g.NUMANode)
		if !withNUMA {
			numa = -1
		}
		out = append(out, GPU{Index: i, PCIBusID: g.PCIAddress, NUMANode: numa, PCIeRoot: g.PCIeRoot})
	}
	return out
}

// cdiSpec is the part of the CDI specification (cncf-tags/container-device-interface
// SPEC.md) the fake driver writes: devices that only set environment variables.
type cdiSpec struct {
	Version string      `json:"cdiVersion"`
	Kind    string      `json:"kind"`
	Devices []cdiDevice `json:"devices"`
}

type cdiDevice struct {
	Name           string `json:"name"`
	ContainerEdits struct {
		Env []string `json:"env"`
	} `json:"containerEdits"`
}

// CDISpec is the CDI spec of one claim's GPUs and the CDI device ID of each
// (by device name). Device names carry the claim UID, so a runtime's cached
// spec of an earlier claim is never mistaken for this one.
func CDISpec(claim types.UID, gpus []GPU) ([]byte, map[string]string, error) {
	spec := cdiSpec{Version: "0.6.0", Kind: CDIKind}
	ids := map[string]string{}
	for _, g := range gpus {
		d := cdiDevice{Name: fmt.Sprintf("%s-%s", claim, g.Name())}
		d.ContainerEdits.Env = []string{g.Env()}
		spec.Devices = append(spec.Devices, d)
		ids[g.Name()] = CDIKind + "=" + d.Name
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	return append(data, '\n'), ids, nil
}

// CDIFile is the spec file's name for a claim, in the CDI directory.
func CDIFile(claim types.UID) string {
	return strings.ReplaceAll(CDIKind, "/", "-") + "_" + string(claim) + ".json"
}
