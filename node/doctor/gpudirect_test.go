package doctor

import (
	"strings"
	"testing"
)

// TestCheckGPUDirect: the check passes by either path NCCL takes, fails
// only where neither can work, and never offers modprobe nvidia_peermem
// where the kernel lacks the peer memory API it needs.
func TestCheckGPUDirect(t *testing.T) {
	t.Parallel()
	open := GPUDirectFacts{NVIDIADriver: true, Module: ModuleOpen, ModuleFrom: "taint O", Kernel: "6.8.0-1015-azure", DMABUFSymbol: TriYes, PeerClientSymbol: TriNo}
	with := func(f func(*GPUDirectFacts)) GPUDirectFacts { g := open; f(&g); return g }
	for _, tc := range []struct {
		name    string
		g       GPUDirectFacts
		status  Status
		message string
		fix     string
		noFix   string
	}{
		{"open module, DMA-BUF kernel", open, Pass, "through DMA-BUF", "", ""},
		{"peermem and DMA-BUF", with(func(g *GPUDirectFacts) { g.Peermem = "module/nvidia_peermem/version" }), Pass, "NCCL prefers it", "", ""},
		{"kernel 5.4", with(func(g *GPUDirectFacts) { g.Kernel = "5.4.0-1109-azure"; g.DMABUFSymbol = TriNo }), Fail, "kernel 5.4.0-1109-azure is older than 5.12", "on a kernel >= 5.12", "modprobe"},
		{"proprietary, inbox RDMA core", with(func(g *GPUDirectFacts) { g.Module = ModuleProprietary }), Fail, "proprietary kernel module", "open GPU kernel modules", "modprobe"},
		{"proprietary, OFED", with(func(g *GPUDirectFacts) { g.Module = ModuleProprietary; g.PeerClientSymbol = TriYes }), Fail, "proprietary kernel module", "modprobe nvidia_peermem", ""},
		{"kallsyms unreadable", with(func(g *GPUDirectFacts) { g.DMABUFSymbol, g.PeerClientSymbol = TriUnknown, TriUnknown }), Warn, "cannot read /proc/kallsyms", "--proc-root", ""},
		{"module unknown", with(func(g *GPUDirectFacts) { g.Module = ModuleUnknown }), Warn, "which NVIDIA kernel module", "", ""},
		{"no driver", GPUDirectFacts{}, Warn, "no NVIDIA driver", "open GPU kernel modules", ""},
	} {
		r := checkGPUDirect(Facts{GPUDirect: tc.g})
		if r.Status != tc.status || !strings.Contains(r.Message, tc.message) || !strings.Contains(r.Fix, tc.fix) {
			t.Errorf("%s: %s %q fix %q; want %s, message with %q, fix with %q", tc.name, r.Status, r.Message, r.Fix, tc.status, tc.message, tc.fix)
		}
		if tc.noFix != "" && strings.Contains(r.Fix, tc.noFix) {
			t.Errorf("%s: fix %q offers %q, which cannot work here", tc.name, r.Fix, tc.noFix)
		}
	}
}

func TestKernelAtLeast(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		release     string
		atLeast, ok bool
	}{
		{"6.18.44-fc-v657-gpu", true, true},
		{"5.12.0", true, true},
		{"5.11.22-100.fc32", false, true},
		{"5.15.0-1079-azure", true, true},
		{"4.18.0-553.el8_10", false, true},
		{"5.12-rc1", true, true},
		{"", false, false},
		{"garbage", false, false},
	} {
		if a, ok := kernelAtLeast(tc.release, dmabufKernel); a != tc.atLeast || ok != tc.ok {
			t.Errorf("kernelAtLeast(%q) = %v, %v; want %v, %v", tc.release, a, ok, tc.atLeast, tc.ok)
		}
	}
}
