package nri

import (
	"context"
	"errors"
	"fmt"
	"path"

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
	if p.cfg.RankConfDir == "" && len(roceHCAs(heldHCAs(p.inv.Inventory(), ctr.GetLinux().GetDevices()))) == 0 {
		// Nothing to choose: no rank conf file, no RoCE GID index.
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

// imageHomeConf reads the image's own .nccl.conf in the passwd home, which
// the rank conf mount hides, within a quarter of PasswdTimeout; "" when the
// image has none or it cannot be read (the mount then hides it unread, as
// before: logged).
func (p *Plugin) imageHomeConf(ctrID, home string) string {
	if p.cfg.Image == nil || !path.IsAbs(home) {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.PasswdTimeout/4)
	defer cancel()
	name := path.Join(home, memlock.RankConfName)
	b, err := p.cfg.Image.ReadFile(ctx, ctrID, name, memlock.RankConfMaxBytes)
	switch {
	case errors.Is(err, imagefs.ErrNotExist):
		return ""
	case err != nil:
		p.log.Info("the image's own conf file, which the rank conf mount hides, was not read; its settings are not carried", "file", name, "error", boundedError(err))
		return ""
	}
	return string(b)
}
