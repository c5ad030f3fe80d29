package nri

import (
	"context"
	"fmt"

	"github.com/containerd/nri/pkg/api"

	"github.com/ibkube/ibkube/node/imagefs"
	"github.com/ibkube/ibkube/node/memlock"
)

// amdKFD is the device an AMD GPU container holds (ROCm's kernel fusion
// driver): its ranks load RCCL, which reads .rccl.conf, not .nccl.conf.
const amdKFD = "/dev/kfd"

// imageLibraries reads which NCCL (and whether RCCL) the container will
// load, from its image, within half of PasswdTimeout (the passwd read has
// the other half of what the runtime's NRI call allows); only for containers holding
// ibkube's devices. What cannot be read leaves the plan unknown, whose
// choices are the safe ones for current releases.
func (p *Plugin) imageLibraries(ctr *api.Container, in memlock.RankInput) (memlock.NCCLPlan, bool) {
	rccl := false
	for _, d := range ctr.GetLinux().GetDevices() {
		if d.GetPath() == amdKFD {
			rccl = true
		}
	}
	if p.cfg.Image == nil || !memlock.HoldsIBDevice(in) {
		return memlock.NCCLPlan{}, rccl
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.PasswdTimeout/2)
	defer cancel()
	libs, err := imagefs.FindLibraries(ctx, func(ctx context.Context, name string, max int64) ([]byte, error) {
		return p.cfg.Image.ReadFile(ctx, ctr.GetId(), name, max)
	})
	if err != nil {
		p.log.V(1).Info("image's libraries not all read; choices for what was not read are those safe for current releases", "container", ctr.GetName(), "error", boundedError(err))
	}
	return planOf(libs, func(lib imagefs.Library, err error) {
		p.log.V(1).Info("library version not understood", "container", ctr.GetName(), "library", lib.Name, "version", fmt.Sprintf("%q", lib.Version), "from", lib.From, "error", err.Error())
	}, rccl)
}

// planOf turns the libraries found into the NCCL plan and whether RCCL is
// loaded; a version that does not parse is reported and left out.
func planOf(libs []imagefs.Library, bad func(imagefs.Library, error), rccl bool) (memlock.NCCLPlan, bool) {
	var plan memlock.NCCLPlan
	for _, l := range libs {
		if l.Name == "RCCL" {
			rccl = true
			continue
		}
		v, err := memlock.ParseVersion(l.Version)
		if err != nil {
			bad(l, err)
			continue
		}
		plan.Found = append(plan.Found, memlock.NCCLFound{Version: v, From: l.From})
	}
	return plan, rccl
}
