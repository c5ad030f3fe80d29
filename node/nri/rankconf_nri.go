package nri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/ibkube/ibkube/internal/atomicfile"
	"github.com/ibkube/ibkube/node/memlock"
)

// rankConfSuffix ends every file the plugin writes under RankConfDir, so
// that cleaning up never touches anything else there.
const rankConfSuffix = ".nccl.conf"

// containerIDPattern is what a container ID must look like to become a file
// name (containerd and CRI-O use 64 hex digits).
var containerIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// ImageReader reads a file of the root filesystem the runtime prepared for
// a container, before the container starts (imagefs.Containerd).
type ImageReader interface {
	ReadFile(ctx context.Context, containerID, name string, max int64) ([]byte, error)
}

// DefaultPasswdTimeout bounds the read of a container's /etc/passwd inside
// the runtime's CreateContainer call (containerd gives every NRI plugin 2 s
// by default, plugin_request_timeout).
const DefaultPasswdTimeout = time.Second

// boundedError is an error's text cut to 256 bytes, for a reason that may
// end up in an Event.
func boundedError(err error) string {
	s := err.Error()
	if len(s) > 256 {
		s = s[:256] + "..."
	}
	return strconv.QuoteToASCII(s)[1 : len(strconv.QuoteToASCII(s))-1]
}

// RankInputOf turns an NRI container into DecideRankConf's input, without
// the image's passwd entry (rankConf reads it only for containers that
// hold ibkube's devices).
func (p *Plugin) RankInputOf(pod *api.PodSandbox, ctr *api.Container) memlock.RankInput {
	in := memlock.RankInput{
		PodAnnotations: pod.GetAnnotations(),
		IBDevices:      memlock.DevicesOf(p.inv.Inventory()),
		Env:            ctr.GetEnv(),
	}
	for _, d := range ctr.GetLinux().GetDevices() {
		in.Devices = append(in.Devices, memlock.Device{Path: d.GetPath(), Type: d.GetType(), Major: d.GetMajor(), Minor: d.GetMinor()})
	}
	if u := ctr.GetUser(); u != nil {
		uid := u.GetUid()
		in.UID = &uid
	}
	for _, m := range ctr.GetMounts() {
		in.MountDestinations = append(in.MountDestinations, m.GetDestination())
	}
	return in
}

// rankConf writes the container's NCCL conf file and adds its read-only
// bind mount to adj; added is the environment this plugin adds to the
// container, which its main process sees too. Failures are logged and
// counted, never returned: the container starts regardless.
func (p *Plugin) rankConf(pod *api.PodSandbox, ctr *api.Container, adj *api.ContainerAdjustment, added []string, plan memlock.NCCLPlan, rccl bool) bool {
	if p.cfg.RankConfDir == "" {
		return false
	}
	in := p.RankInputOf(pod, ctr)
	in.Env = append(slices.Clone(in.Env), added...)
	in.NCCL, in.RCCL = plan, rccl
	if memlock.HoldsIBDevice(in) && in.UID != nil {
		in.Passwd = p.passwdOf(ctr.GetId(), *in.UID)
	}
	if in.Passwd.Status == memlock.PasswdFound {
		in.ImageHomeConf = p.imageHomeConf(ctr.GetId(), in.Passwd.Home)
	}
	c := mountable(memlock.DecideRankConf(in), in.MountDestinations)
	kv := []any{"pod", pod.GetNamespace() + "/" + pod.GetName(), "container", ctr.GetName(), "outcome", c.Outcome}
	if c.Outcome == memlock.RankNoDevices {
		p.metrics.rankConfs.WithLabelValues(string(c.Outcome)).Inc()
		return false
	}
	ref := PodRef{Namespace: pod.GetNamespace(), Name: pod.GetName(), UID: pod.GetUid()}
	if c.Outcome != memlock.RankWritten {
		p.metrics.rankConfs.WithLabelValues(string(c.Outcome)).Inc()
		p.log.Info(c.Reason, kv...)
		if p.events != nil && c.Outcome != memlock.RankNothing {
			p.events.RankConfEvent(ref, ctr.GetName(), c)
		}
		return false
	}
	file, err := p.writeRankConf(ctr.GetId(), c.Content)
	if err != nil {
		p.metrics.rankConfs.WithLabelValues("error").Inc()
		p.log.Error(err, "NCCL conf file for processes started without the container's environment not written; they miss its NCCL settings", kv...)
		return false
	}
	p.metrics.rankConfs.WithLabelValues(string(c.Outcome)).Inc()
	p.log.Info(c.Reason, append(kv, "file", file, "targets", c.Targets)...)
	if c.Warn && p.events != nil {
		p.events.RankConfEvent(ref, ctr.GetName(), c)
	}
	for _, target := range c.Targets {
		adj.AddMount(&api.Mount{Destination: target, Source: file, Type: "bind", Options: []string{"rbind", "ro", "rprivate"}})
	}
	return true
}

// rankConfFile is where a container's file lives on the host.
func (p *Plugin) rankConfFile(id string) (string, error) {
	if !containerIDPattern.MatchString(id) {
		return "", fmt.Errorf("container id %q is not a plain name", id)
	}
	return filepath.Join(p.cfg.RankConfDir, id+rankConfSuffix), nil
}

func (p *Plugin) writeRankConf(id, content string) (string, error) {
	file, err := p.rankConfFile(id)
	if err != nil {
		return "", err
	}
	// Only root lists the directory: a container reads its own file through
	// the bind mount, which needs no access to the directory.
	if err := os.MkdirAll(p.cfg.RankConfDir, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", p.cfg.RankConfDir, err)
	}
	// World-readable: the container's user may be any uid.
	if err := atomicfile.Write(file, []byte(content), 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", file, err)
	}
	return file, nil
}

// removeRankConf deletes a container's file once it stops or is removed.
func (p *Plugin) removeRankConf(id string) {
	if p.cfg.RankConfDir == "" {
		return
	}
	file, err := p.rankConfFile(id)
	if err != nil {
		return
	}
	if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
		p.log.Error(err, "remove the NCCL conf file of a stopped container", "file", file)
	}
}

// removeStaleRankConfs deletes the files of containers the runtime no longer
// has or that no longer run (stopped or removed while the agent was away).
func (p *Plugin) removeStaleRankConfs(ctrs []*api.Container) {
	if p.cfg.RankConfDir == "" {
		return
	}
	live := map[string]bool{}
	for _, c := range ctrs {
		if c.GetState() != api.ContainerState_CONTAINER_STOPPED {
			live[c.GetId()+rankConfSuffix] = true
		}
	}
	entries, err := os.ReadDir(p.cfg.RankConfDir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			p.log.Error(err, "list NCCL conf files to clean up", "dir", p.cfg.RankConfDir)
		}
		return
	}
	removed := 0
	for _, e := range entries {
		name := e.Name()
		// ".tmp-" is how agents before internal/atomicfile named their
		// temporary files; a crash of one may have left some behind.
		stale := atomicfile.IsTemp(name) || strings.HasPrefix(name, ".tmp-") || (strings.HasSuffix(name, rankConfSuffix) && !live[name])
		if e.IsDir() || !stale {
			continue
		}
		if err := os.Remove(filepath.Join(p.cfg.RankConfDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			p.log.Error(err, "remove a stale NCCL conf file", "file", name)
			continue
		}
		removed++
	}
	if removed > 0 {
		p.log.Info("removed NCCL conf files of containers that no longer run", "count", removed, "dir", p.cfg.RankConfDir)
	}
}
