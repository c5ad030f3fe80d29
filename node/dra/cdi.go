package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/atomicfile"
	"github.com/ibkube/ibkube/node/resource"
)

// CDI names. A CDI device ID is "<kind>=<name>" (the CDI spec's
// "vendor.com/class=name"); the driver's name is the vendor.
const (
	CDIClass = "hca"
	CDIKind  = contract.DRADriverName + "/" + CDIClass
	// DefaultCDIDir is where containerd and CRI-O look for CDI specs that
	// change at run time (containerd's cdi_spec_dirs default is
	// /etc/cdi and /var/run/cdi).
	DefaultCDIDir = "/var/run/cdi"
)

// Annotations of a claim's CDI spec: what Unprepare and the next Prepare
// need after the claim object and this process are gone.
const (
	annotationClaim = contract.DRADriverName + "/claim"
	// annotationExclusive lists the claim's exclusive devices, so that
	// Prepare refuses to hand one to a second claim.
	annotationExclusive = contract.DRADriverName + "/exclusive-devices"
)

// Request is one request of a claim with the devices allocated to it.
type Request struct {
	// Name is the request's name as the allocation result spells it
	// ("gpu-nic" or, for a subrequest, "gpu-nic/ib").
	Name    string
	Devices []Device
}

// CDIDeviceName is the CDI device of one request of a claim: unique per
// claim, so a runtime's cached spec of an earlier claim never matches.
func CDIDeviceName(claim types.UID, request string) string {
	return string(claim) + "-" + strings.ReplaceAll(request, "/", "_")
}

// CDIDeviceID is the fully qualified CDI device ID the kubelet hands the
// runtime.
func CDIDeviceID(claim types.UID, request string) string {
	return CDIKind + "=" + CDIDeviceName(claim, request)
}

// ClaimSpec is a claim's CDI spec: one CDI device per request holding
// exactly that request's HCAs (their uverbs and the pool's management char
// devices, rdma_cm), NCCL_IB_HCA and UCX_NET_DEVICES naming them, and the
// node's NCCL topology file, as the device plugin's Allocate gives them.
func ClaimSpec(claim types.UID, ref string, reqs []Request) (*cdispec.Spec, error) {
	spec := &cdispec.Spec{Kind: CDIKind, Annotations: map[string]string{annotationClaim: ref}}
	var exclusive []string
	for _, r := range reqs {
		edits, err := requestEdits(r.Devices)
		if err != nil {
			return nil, fmt.Errorf("request %q: %w", r.Name, err)
		}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: CDIDeviceName(claim, r.Name), ContainerEdits: edits})
		for _, d := range r.Devices {
			if d.Pool.Exclusive() && !slices.Contains(exclusive, d.Name) {
				exclusive = append(exclusive, d.Name)
			}
		}
	}
	if len(exclusive) > 0 {
		sort.Strings(exclusive)
		spec.Annotations[annotationExclusive] = strings.Join(exclusive, ",")
	}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, err
	}
	spec.Version = v
	return spec, nil
}

// requestEdits merges what each pool grants for its part of the devices
// (resource.Grant.Merge) into CDI edits; a request normally draws from one
// pool (its DeviceClass selects one).
func requestEdits(devs []Device) (cdispec.ContainerEdits, error) {
	var pools []*resource.Pool
	byPool := map[*resource.Pool][]string{}
	for _, d := range devs {
		if _, ok := byPool[d.Pool]; !ok {
			pools = append(pools, d.Pool)
		}
		if !slices.Contains(byPool[d.Pool], d.HCA.Name) {
			byPool[d.Pool] = append(byPool[d.Pool], d.HCA.Name)
		}
	}
	var grant resource.Grant
	for _, p := range pools {
		g, err := p.AllocateHCAs(byPool[p])
		if err != nil {
			return cdispec.ContainerEdits{}, err
		}
		grant.Merge(g)
	}
	return containerEdits(grant), nil
}

// containerEdits is CDI's form of a grant.
func containerEdits(g resource.Grant) cdispec.ContainerEdits {
	var e cdispec.ContainerEdits
	for _, d := range g.Devices {
		e.DeviceNodes = append(e.DeviceNodes, &cdispec.DeviceNode{Path: d.ContainerPath, HostPath: d.HostPath, Type: "c", Permissions: d.Permissions})
	}
	for _, m := range g.Mounts {
		e.Mounts = append(e.Mounts, &cdispec.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, Options: []string{"ro", "nosuid", "nodev", "bind"}})
	}
	for _, v := range g.Env {
		e.Env = append(e.Env, v.Name+"="+v.Value)
	}
	return e
}

// specStore keeps one CDI spec file per claim UID in a directory: the
// driver's only state, so a restarted agent (or the other instance of a
// rolling update) sees what is prepared.
type specStore struct {
	dir string
	// seen caches the exclusive devices of spec files by name, valid while
	// the file's size and modification time stay; nil disables it.
	seen *holderCache
}

type holderCache struct {
	mu    sync.Mutex
	files map[string]cachedHolders
}

type cachedHolders struct {
	size    int64
	modTime time.Time
	devices []string
}

const specPrefix = contract.DRADriverName + "-" + CDIClass + "_"

func (s specStore) path(claim types.UID) string {
	return filepath.Join(s.dir, specPrefix+string(claim)+".json")
}

// write replaces the claim's spec atomically: a runtime reading the
// directory sees the old file or the new one, never a part.
func (s specStore) write(claim types.UID, spec *cdispec.Spec) error {
	data, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encode CDI spec of claim %s: %w", claim, err)
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("CDI directory: %w", err)
	}
	// atomicfile's temporary name does not end in .json, so a runtime
	// scanning the directory skips it.
	if err := atomicfile.Write(s.path(claim), data, 0o644); err != nil {
		return fmt.Errorf("write CDI spec of claim %s: %w", claim, err)
	}
	return nil
}

// read returns the claim's spec, or nil when there is none.
func (s specStore) read(claim types.UID) (*cdispec.Spec, error) {
	data, err := os.ReadFile(s.path(claim))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read CDI spec of claim %s: %w", claim, err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("%s: %w", s.path(claim), err)
	}
	return &spec, nil
}

func (s specStore) remove(claim types.UID) error {
	if err := os.Remove(s.path(claim)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove CDI spec of claim %s: %w", claim, err)
	}
	return nil
}

// exclusiveHolders maps each exclusive device held by a prepared claim to
// that claim's UID.
func (s specStore) exclusiveHolders() (map[string]types.UID, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list CDI specs: %w", err)
	}
	if s.seen != nil {
		s.seen.mu.Lock()
		defer s.seen.mu.Unlock()
		if s.seen.files == nil {
			s.seen.files = map[string]cachedHolders{}
		}
	}
	out := map[string]types.UID{}
	present := map[string]bool{}
	for _, e := range entries {
		uid, ok := strings.CutPrefix(e.Name(), specPrefix)
		if !ok {
			continue
		}
		uid, ok = strings.CutSuffix(uid, ".json")
		if !ok {
			continue
		}
		present[e.Name()] = true
		devs, ok := s.exclusiveOf(e, types.UID(uid))
		if !ok {
			continue // gone meanwhile, or not ours to judge
		}
		for _, d := range devs {
			out[d] = types.UID(uid)
		}
	}
	if s.seen != nil {
		for name := range s.seen.files {
			if !present[name] {
				delete(s.seen.files, name)
			}
		}
	}
	return out, nil
}

// exclusiveOf returns the exclusive devices the spec file e holds, from
// the cache when the file has not changed since it was read.
func (s specStore) exclusiveOf(e os.DirEntry, uid types.UID) ([]string, bool) {
	info, err := e.Info()
	if err != nil {
		return nil, false
	}
	if s.seen != nil {
		if c, ok := s.seen.files[e.Name()]; ok && c.size == info.Size() && c.modTime.Equal(info.ModTime()) {
			return c.devices, true
		}
	}
	spec, err := s.read(uid)
	if err != nil || spec == nil {
		return nil, false
	}
	var devs []string
	for _, d := range strings.Split(spec.Annotations[annotationExclusive], ",") {
		if d != "" {
			devs = append(devs, d)
		}
	}
	if s.seen != nil {
		s.seen.files[e.Name()] = cachedHolders{size: info.Size(), modTime: info.ModTime(), devices: devs}
	}
	return devs, true
}
