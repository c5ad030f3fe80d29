package nri

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/ibkube/ibkube/node/imagefs"
	"github.com/ibkube/ibkube/node/memlock"
)

// serialImage lets one read of an image run at a time, whichever container
// asked: a hostile image costs one lookup's bound, not one per container
// created at once. A read waiting for its turn gives up at its own
// context's end.
type serialImage struct {
	image ImageReader
	turn  chan struct{}
}

func oneAtATime(image ImageReader) serialImage {
	return serialImage{image: image, turn: make(chan struct{}, 1)}
}

func (s serialImage) ReadFile(ctx context.Context, containerID, name string, max int64) ([]byte, error) {
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for another container's image read: %w", ctx.Err())
	}
	defer func() { <-s.turn }()
	return s.image.ReadFile(ctx, containerID, name, max)
}

// passwdOf reads the image's /etc/passwd entry for uid within
// PasswdTimeout, the wait for its turn included. The read runs in this
// call and stops at the deadline (imagefs consults it before every step),
// so nothing of it runs on once passwdOf has returned; a read that does
// not finish in time gives PasswdUnread, and the container starts
// regardless.
func (p *Plugin) passwdOf(ctrID string, uid uint32) memlock.Passwd {
	if p.cfg.Image == nil {
		return memlock.Passwd{Why: "the agent has no access to the runtime's snapshots"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.PasswdTimeout)
	defer cancel()
	b, err := p.cfg.Image.ReadFile(ctx, ctrID, "/etc/passwd", memlock.PasswdMaxBytes)
	switch {
	case err == nil:
		return memlock.LookupPasswd(b, uid)
	case errors.Is(err, imagefs.ErrNotExist):
		return memlock.Passwd{Status: memlock.PasswdNoEntry}
	case ctx.Err() != nil:
		return memlock.Passwd{Why: fmt.Sprintf("not read within %s: %s", p.cfg.PasswdTimeout, boundedError(err))}
	case errors.Is(err, imagefs.ErrOpacityUnknown):
		return memlock.Passwd{Why: "it lies in a lower layer below a directory that may be opaque, which the agent cannot tell without CAP_SYS_ADMIN (overlayfs keeps the mark in trusted.overlay.opaque)"}
	}
	return memlock.Passwd{Why: boundedError(err)}
}

// mountable keeps the targets of a written conf file that the runtime can
// mount and that mount nothing over the container's own mounts: a target
// in one of the container's mounts (a volume, the service-account token's
// read-only directory) would have runc create the file inside that mount,
// writing into the volume or failing the container's start on a read-only
// one; and a target that is not valid UTF-8 cannot be carried by the
// runtime's API. With no target left the outcome is RankNoHome, worth an
// Event; the container starts regardless.
func mountable(c memlock.RankConf, mountDestinations []string) memlock.RankConf {
	if c.Outcome != memlock.RankWritten {
		return c
	}
	var kept, notes []string
	for _, target := range c.Targets {
		if !utf8.ValidString(target) {
			notes = append(notes, fmt.Sprintf("%q is not valid UTF-8, which the runtime's API cannot carry", target))
			continue
		}
		if m := mountHolding(target, mountDestinations); m != "" {
			notes = append(notes, fmt.Sprintf("%s lies in the container's mount %s, into which the runtime would write it (or fail the container's start when read-only)", target, m))
			continue
		}
		kept = append(kept, target)
	}
	if len(notes) == 0 {
		return c
	}
	why := strings.Join(notes, "; ") + "; not mounted there"
	if len(kept) == 0 {
		return memlock.RankConf{Outcome: memlock.RankNoHome, Reason: why + ": no NCCL conf file mounted for processes started without the container's environment", Warn: true}
	}
	c.Targets = kept
	c.Reason += "; " + why
	c.Warn = true
	return c
}

// mountHolding is the container mount that target lies in, or "" (a
// mount at the target itself is the container's own file, which
// DecideRankConf already leaves alone).
func mountHolding(target string, mountDestinations []string) string {
	for _, m := range mountDestinations {
		m = path.Clean(m)
		if m == "/" || strings.HasPrefix(target, m+"/") {
			return m
		}
	}
	return ""
}
