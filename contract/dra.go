package contract

// DRADriverName is the DRA driver's name: the ResourceSlices' spec.driver,
// the domain of the device attributes below and the vendor of the CDI
// devices Prepare hands out. A DeviceClass selects the driver's devices with
// `device.driver == "rdma.infiniband.azure.com"`.
const DRADriverName = "rdma.infiniband.azure.com"

// DeviceClasses the chart renders (cluster-scoped) and the extended resource
// names they serve (KEP-5004 spec.extendedResourceName): a pod asking
// `rdma/ib: 2` on a node in DRA mode gets two devices of DeviceClassIB.
const (
	DeviceClassIB       = "ibkube-rdma-ib"
	DeviceClassSharedIB = "ibkube-rdma-shared-ib"
	DeviceClassRoCE     = "ibkube-rdma-roce"

	ExtendedResourceIB       = ResourceExclusiveIB
	ExtendedResourceSharedIB = ResourceSharedIB
	ExtendedResourceRoCE     = ResourceRoCE
)

// DeviceClassSelector is the CEL selector of the DeviceClass serving the
// pool named resource: the driver's devices whose pool attribute is it.
func DeviceClassSelector(resource string) string {
	return `device.driver == "` + DRADriverName + `" && device.attributes["` + DRADriverName + `"].` + DRAAttrPool + ` == "` + resource + `"`
}

// Device attributes in the driver's domain (written without the domain in
// the ResourceSlice, `device.attributes["rdma.infiniband.azure.com"].pool`
// in CEL). The standard ones (resource.kubernetes.io/pciBusID, pcieRoot,
// numaNode) are published too. The scheduler builds every attribute of a
// device into maps each time it evaluates a selector on it, so the set is
// what claims select on (docs/dra-driver.md, "What the scheduler pays").
const (
	// DRAAttrPool is the agent config pool the device belongs to, by its
	// resource name ("rdma/ib", "rdma/shared_ib"): what a DeviceClass
	// selects on, besides the driver.
	DRAAttrPool       = "pool"
	DRAAttrLinkLayer  = "linkLayer"  // "InfiniBand" or "Ethernet", as the kernel spells it
	DRAAttrRate       = "rate"       // the port's rate in Gb/s (int): 400 for NDR
	DRAAttrRDMADevice = "rdmaDevice" // the kernel's RDMA device name, "mlx5_0"
	DRAAttrFirmware   = "firmware"
	DRAAttrVendorID   = "vendorID" // "15b3", no 0x prefix
	DRAAttrDeviceID   = "deviceID" // "101e"
)

// RetiredAttribute is a device attribute the driver published and no
// longer does, and what a claim reads instead.
type RetiredAttribute struct {
	Name string
	// Instead is a CEL selector that does what reading Name did.
	Instead string
	// Why it went.
	Why string
}

// DRARetiredAttributes are the retired attributes, for docs/dra.md's
// table and the test that a claim reading one gets the scheduler's CEL
// error ("no such key"), not a silent non-match.
func DRARetiredAttributes() []RetiredAttribute {
	return []RetiredAttribute{
		{Name: "mode", Instead: `!device.allowMultipleAllocations`,
			Why: "said what device.allowMultipleAllocations and the pool attribute say"},
		{Name: "nodeGUID", Instead: `device.attributes["` + DRADriverName + `"].` + DRAAttrRDMADevice + ` == "mlx5_0"`,
			Why: "an identity no claim selects on; rdmaDevice or resource.kubernetes.io/pciBusID name an HCA of the node, `ibkube node` shows the GUID"},
		{Name: "netdev", Instead: `device.attributes["` + DRADriverName + `"].` + DRAAttrRDMADevice + ` == "mlx5_0"`,
			Why: "the IPoIB or RoCE interface follows from rdmaDevice, one to one; `ibkube node` shows it"},
	}
}

// DRACapacitySlots is the consumable capacity of a shared pool's device
// (KEP-5075): the pool's slot count; a request takes one slot unless it asks
// for more.
const DRACapacitySlots = "slots"

// DRACounterSetHCAs is the shared counter set of a node's HCAs (KEP-4815;
// "hcas-1", "hcas-2", ... hold the HCAs past each 32): one counter per HCA,
// named after it ("mlx5-0"), which every device of the HCA consumes, a
// shared device one unit and an exclusive device all of them, so the
// scheduler never hands one HCA to an exclusive claim and to sharers at
// once.
const DRACounterSetHCAs = "hcas"

// DRATaintUnhealthy is the key of the NoSchedule device taint an unhealthy
// HCA carries in the ResourceSlice (port down, char device missing); it goes
// when the HCA is healthy again.
const DRATaintUnhealthy = DRADriverName + "/unhealthy"

// Allocation modes of the node agent (--allocation, the chart's
// node.allocation and the node label below).
const (
	AllocationDevicePlugin = "deviceplugin"
	AllocationDRA          = "dra"
)

// AllocationNodeLabel moves one node between the two modes: the chart's two
// DaemonSets select nodes by it; absent means the chart's default.
const AllocationNodeLabel = "infiniband.azure.com/allocation"
