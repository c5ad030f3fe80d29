package doctor

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ibkube/ibkube/hca/discovery"
)

// GPUDirect RDMA reaches GPU memory by one of two paths, and NCCL takes
// either (NVIDIA/nccl v2.30.7-1 src/graph/topo.cc: gdr = NCCL_PTR_CUDA from
// peermem, or NCCL_PTR_DMABUF when the GPU supports DMA-BUF):
//
//   - peermem: NCCL tests for one of peermemPaths
//     (src/transport/net_ib/gdr.cc ibGdrSupportInitOnce). nvidia_peermem
//     registers through ib_register_peer_memory_client, which only
//     MLNX_OFED/DOCA-OFED's RDMA core exports; on an inbox RDMA core its init
//     fails with EINVAL, so "modprobe nvidia_peermem" cannot succeed there.
//   - DMA-BUF: on by default since NCCL 2.13 (v2.13.4-1 src/init.cc
//     NCCL_DMABUF_ENABLE=1, CUDA driver >= 11.7), preferred when both work.
//     The kernel side is ib_umem_dmabuf_get (Linux 5.12,
//     drivers/infiniband/core/umem_dmabuf.c); the GPU side needs NVIDIA's
//     open kernel modules, which export GPU memory as a dma-buf.
//
// What the image needs on top (NCCL >= 2.13, rdma-core >= 34 for
// ibv_reg_dmabuf_mr) the node cannot see: the check says so, and how a job
// log proves it.

// peermemPaths are the files whose existence NCCL takes for peermem.
var peermemPaths = []string{
	"kernel/mm/memory_peers/nv_mem/version",
	"kernel/mm/memory_peers/nv_mem_nc/version",
	"module/nvidia_peermem/version",
}

// Kernel symbols the DMA-BUF and peermem paths need.
const (
	symDMABUF     = "ib_umem_dmabuf_get"
	symPeerClient = "ib_register_peer_memory_client"
)

// dmabufKernel is the first Linux release with ib_umem_dmabuf_get.
var dmabufKernel = [2]int{5, 12}

// NVIDIAModule is which NVIDIA kernel module flavour is loaded.
type NVIDIAModule string

// Module flavours.
const (
	ModuleUnknown     NVIDIAModule = ""
	ModuleOpen        NVIDIAModule = "open"
	ModuleProprietary NVIDIAModule = "proprietary"
)

// Tri is a fact that may be unknown.
type Tri string

// Tri values.
const (
	TriUnknown Tri = ""
	TriYes     Tri = "yes"
	TriNo      Tri = "no"
)

// GPUDirectFacts are what the node shows of the two GPUDirect RDMA paths.
type GPUDirectFacts struct {
	// NVIDIADriver is true when the nvidia module is loaded.
	NVIDIADriver bool `json:"nvidiaDriver"`
	// Peermem is the file NCCL found for peermem, "" when none.
	Peermem string `json:"peermem,omitempty"`
	// Module is the driver's flavour and ModuleFrom what told it.
	Module     NVIDIAModule `json:"module,omitempty"`
	ModuleFrom string       `json:"moduleFrom,omitempty"`
	// Kernel is the running kernel's release.
	Kernel string `json:"kernel,omitempty"`
	// DMABUFSymbol and PeerClientSymbol say whether the kernel exports
	// ib_umem_dmabuf_get and ib_register_peer_memory_client.
	DMABUFSymbol     Tri `json:"dmabufSymbol,omitempty"`
	PeerClientSymbol Tri `json:"peerClientSymbol,omitempty"`
}

// imageNeeds and jobLogProof are what the node cannot show.
const (
	imageNeeds  = "the image needs NCCL >= 2.13 and rdma-core >= 34 (ibv_reg_dmabuf_mr), with CUDA driver >= 11.7"
	jobLogProof = "with NCCL_DEBUG=INFO a job log shows \"DMA-BUF is available on GPU device N\", \"NET/IB : GPU Direct RDMA Enabled for HCA\" and channels \"via NET/IB/N/GDRDMA\""
)

// dmabufReady says whether the DMA-BUF path can work on this node: TriYes
// when every prerequisite is seen, TriNo with the missing ones when one is
// known absent, else TriUnknown with what could not be read.
func dmabufReady(g GPUDirectFacts) (Tri, []string) {
	var no, unknown []string
	switch g.Module {
	case ModuleProprietary:
		no = append(no, "the NVIDIA driver is the proprietary kernel module ("+g.ModuleFrom+"), which exports no GPU memory as DMA-BUF")
	case ModuleUnknown:
		unknown = append(unknown, "which NVIDIA kernel module is loaded")
	}
	switch v, ok := kernelAtLeast(g.Kernel, dmabufKernel); {
	case !ok:
		unknown = append(unknown, "the kernel release")
	case !v:
		no = append(no, fmt.Sprintf("kernel %s is older than %d.%d", g.Kernel, dmabufKernel[0], dmabufKernel[1]))
	}
	switch g.DMABUFSymbol {
	case TriNo:
		no = append(no, "the kernel exports no "+symDMABUF+" (RDMA core without DMA-BUF)")
	case TriUnknown:
		unknown = append(unknown, "/proc/kallsyms for "+symDMABUF)
	}
	switch {
	case len(no) > 0:
		return TriNo, no
	case len(unknown) > 0:
		return TriUnknown, unknown
	}
	return TriYes, nil
}

func checkGPUDirect(f Facts) Result {
	g := f.GPUDirect
	res := Result{Name: CheckGPUDirect}
	dmabuf, why := dmabufReady(g)
	switch {
	case !g.NVIDIADriver:
		res.Status, res.Message = Warn, "no NVIDIA driver loaded: GPUDirect RDMA not available (fine for CPU-only RDMA)"
		res.Fix = "on GPU nodes, install NVIDIA's open GPU kernel modules: GPUDirect RDMA then works through DMA-BUF on an inbox RDMA core"
	case g.Peermem != "":
		res.Status, res.Message = Pass, "GPUDirect RDMA through peermem: NCCL finds /sys/"+g.Peermem
		if dmabuf == TriYes {
			res.Message += "; DMA-BUF is possible too, and NCCL prefers it (" + imageNeeds + ")"
		}
	case dmabuf == TriYes:
		res.Status = Pass
		res.Message = fmt.Sprintf("GPUDirect RDMA through DMA-BUF: open kernel module (%s), kernel %s, %s exported; %s; %s", g.ModuleFrom, g.Kernel, symDMABUF, imageNeeds, jobLogProof)
	case dmabuf == TriUnknown:
		res.Status = Warn
		res.Message = "no peermem, and DMA-BUF cannot be confirmed: cannot read " + strings.Join(why, ", ")
		res.Fix = "run with --proc-root and --sysfs-root pointing at the host's; " + jobLogProof
	default:
		res.Status = Fail
		res.Message = "NCCL cannot use GPUDirect RDMA and copies through host memory: no peermem, and DMA-BUF cannot work: " + strings.Join(why, "; ")
		res.Fix = gpudirectFix(g)
	}
	return res
}

// gpudirectFix names a fix that can succeed on this node: modprobe
// nvidia_peermem only where the kernel has the peer memory API it needs.
func gpudirectFix(g GPUDirectFacts) string {
	dmabufFix := "install NVIDIA's open GPU kernel modules (the -open driver packages; GPU Operator driver.kernelModuleType=open)"
	if v, ok := kernelAtLeast(g.Kernel, dmabufKernel); ok && !v || g.DMABUFSymbol == TriNo {
		dmabufFix += fmt.Sprintf(" on a kernel >= %d.%d whose RDMA core exports %s", dmabufKernel[0], dmabufKernel[1], symDMABUF)
	}
	dmabufFix += " for DMA-BUF (" + imageNeeds + ")"
	if g.PeerClientSymbol == TriYes {
		return "modprobe nvidia_peermem (this kernel's RDMA core has " + symPeerClient + "; with AKS-managed GPU drivers it is not loaded by default: aks-rdma-infiniband issue 50), or " + dmabufFix
	}
	return dmabufFix + "; nvidia_peermem cannot load here: it needs MLNX_OFED/DOCA-OFED's " + symPeerClient + ", which an inbox RDMA core lacks"
}

// kernelAtLeast compares a release such as "6.18.44-fc" with major.minor;
// ok is false when the release does not parse.
func kernelAtLeast(release string, want [2]int) (atLeast, ok bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false, false
	}
	major, err := strconv.Atoi(parts[0])
	if err != nil {
		return false, false
	}
	minorDigits := parts[1]
	if i := strings.IndexFunc(minorDigits, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minorDigits = parts[1][:i]
	}
	minor, err := strconv.Atoi(minorDigits)
	if err != nil {
		return false, false
	}
	return major > want[0] || major == want[0] && minor >= want[1], true
}

// maxVersionSize bounds the read of /proc/driver/nvidia/version and the
// other one-line files.
const maxVersionSize = 4096

// gatherGPUDirect reads the GPUDirect facts under a proc and a sysfs root.
func gatherGPUDirect(procRoot, sysfsRoot string) GPUDirectFacts {
	g := GPUDirectFacts{NVIDIADriver: moduleLoaded(procRoot, sysfsRoot, "nvidia")}
	for _, p := range peermemPaths {
		if _, err := os.Stat(filepath.Join(sysfsRoot, p)); err == nil {
			g.Peermem = p
			break
		}
	}
	if b, err := discovery.ReadFile(filepath.Join(procRoot, "sys", "kernel", "osrelease"), maxVersionSize); err == nil {
		g.Kernel = strings.TrimSpace(string(b))
	}
	if g.NVIDIADriver {
		g.Module, g.ModuleFrom = nvidiaModule(procRoot, sysfsRoot)
	}
	g.DMABUFSymbol, g.PeerClientSymbol = kernelSymbols(filepath.Join(procRoot, "kallsyms"))
	return g
}

// nvidiaModule tells the open module from the proprietary one: the
// driver's version file names the open one ("NVIDIA UNIX Open Kernel
// Module"), and the proprietary one taints the kernel 'P'.
func nvidiaModule(procRoot, sysfsRoot string) (NVIDIAModule, string) {
	if b, err := discovery.ReadFile(filepath.Join(procRoot, "driver", "nvidia", "version"), maxVersionSize); err == nil {
		first, _, _ := strings.Cut(string(b), "\n")
		if strings.Contains(first, "Open Kernel Module") {
			return ModuleOpen, "/proc/driver/nvidia/version says Open Kernel Module"
		}
		if strings.HasPrefix(first, "NVRM version:") {
			return ModuleProprietary, "/proc/driver/nvidia/version names no Open Kernel Module"
		}
	}
	if b, err := discovery.ReadFile(filepath.Join(sysfsRoot, "module", "nvidia", "taint"), maxVersionSize); err == nil {
		taint := strings.TrimSpace(string(b))
		if strings.Contains(taint, "P") {
			return ModuleProprietary, "/sys/module/nvidia/taint " + taint
		}
		return ModuleOpen, "/sys/module/nvidia/taint " + taint + " without P"
	}
	return ModuleUnknown, ""
}

// kernelSymbols scans /proc/kallsyms (names are readable to anyone; only
// the addresses are hidden) for the two symbols, stopping once both are
// found.
func kernelSymbols(path string) (dmabuf, peerClient Tri) {
	f, err := os.Open(path)
	if err != nil {
		return TriUnknown, TriUnknown
	}
	defer f.Close()
	dmabuf, peerClient = TriNo, TriNo
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 3 {
			continue
		}
		switch fields[2] {
		case symDMABUF:
			dmabuf = TriYes
		case symPeerClient:
			peerClient = TriYes
		}
		if dmabuf == TriYes && peerClient == TriYes {
			break
		}
	}
	if s.Err() != nil {
		return TriUnknown, TriUnknown
	}
	return dmabuf, peerClient
}
