package dra

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
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
	// annotationExclusive and annotationShared list the HCAs the claim
	// holds exclusively and as a sharer, so that Prepare refuses an HCA
	// one claim holds exclusively to any other. Admin-access requests hold
	// nothing: the API lets them reach devices in use.
	annotationExclusive = contract.DRADriverName + "/exclusive-hcas"
	annotationShared    = contract.DRADriverName + "/shared-hcas"
	// annotationLegacyExclusive is what agents before HCA-level holds
	// wrote: the exclusive devices by name ("ib-mlx5-0"). Still read, so
	// that an upgraded agent keeps the holds of running pods.
	annotationLegacyExclusive = contract.DRADriverName + "/exclusive-devices"
	// annotationAllocation is the fingerprint of the allocation the spec
	// was written for (AllocationFingerprint): a claim UID can be prepared
	// again after a new allocation (the claim deallocated and allocated
	// anew while a spec stayed behind), and only the spec of the same
	// allocation may be reused as it is.
	annotationAllocation = contract.DRADriverName + "/allocation"
)

// AllocationFingerprint identifies this driver's part of a claim's
// allocation: each result's request, pool, device, share and admin access,
// in any order. Two allocations that hand out the same devices the same
// way have the same fingerprint.
func AllocationFingerprint(results []resourceapi.DeviceRequestAllocationResult) string {
	lines := make([]string, 0, len(results))
	for _, r := range results {
		lines = append(lines, strings.Join([]string{
			r.Request, r.Driver, r.Pool, r.Device,
			string(ptr.Deref(r.ShareID, "")), strconv.FormatBool(ptr.Deref(r.AdminAccess, false)),
		}, "\x00"))
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return "sha256:" + hex.EncodeToString(sum[:16])
}

// sameAllocation says whether spec was written for the allocation whose
// fingerprint is fp. A spec of an agent before fingerprints has none and
// counts as the same: the kubelet asks again for every running claim after
// an upgrade, and the agent may not have its model yet to rewrite it.
func sameAllocation(spec *cdispec.Spec, fp string) bool {
	got, ok := spec.Annotations[annotationAllocation]
	return !ok || got == fp
}

// Request is one request of a claim with the devices allocated to it.
type Request struct {
	// Name is the request's name as the allocation result spells it
	// ("gpu-nic" or, for a subrequest, "gpu-nic/ib").
	Name    string
	Devices []Device
	// AdminAccess: the request was allocated with admin access (a
	// monitoring claim): it gets the devices but holds none of them.
	AdminAccess bool
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
	for _, r := range reqs {
		edits, err := requestEdits(r.Devices)
		if err != nil {
			return nil, fmt.Errorf("request %q: %w", r.Name, err)
		}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: CDIDeviceName(claim, r.Name), ContainerEdits: edits})
	}
	h := holdsOf(reqs)
	for key, hcas := range map[string][]string{annotationExclusive: h.exclusive, annotationShared: h.shared} {
		if len(hcas) > 0 {
			spec.Annotations[key] = strings.Join(hcas, ",")
		}
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

// holds are the HCAs one claim holds, by kernel name, sorted.
type holds struct {
	exclusive, shared []string
	// legacyDevices are exclusive devices by name, from a spec an older
	// agent wrote; the driver resolves them to HCAs through its model.
	legacyDevices []string
}

// holdsOf is what a claim's requests hold: the HCAs of its exclusive-pool
// devices exclusively, those of its shared-pool devices as a sharer; an
// admin-access request holds nothing.
func holdsOf(reqs []Request) holds {
	var h holds
	for _, r := range reqs {
		if r.AdminAccess {
			continue
		}
		for _, d := range r.Devices {
			list := &h.shared
			if d.Pool.Exclusive() {
				list = &h.exclusive
			}
			if !slices.Contains(*list, d.HCA.Name) {
				*list = append(*list, d.HCA.Name)
			}
		}
	}
	sort.Strings(h.exclusive)
	sort.Strings(h.shared)
	return h
}

func splitList(s string) []string {
	var out []string
	for _, it := range strings.Split(s, ",") {
		if it != "" {
			out = append(out, it)
		}
	}
	return out
}

func holdsFromSpec(spec *cdispec.Spec) holds {
	return holds{
		exclusive:     splitList(spec.Annotations[annotationExclusive]),
		shared:        splitList(spec.Annotations[annotationShared]),
		legacyDevices: splitList(spec.Annotations[annotationLegacyExclusive]),
	}
}

// uidPattern is the form of the UIDs the API server gives objects
// (k8s.io/apimachinery/pkg/util/uuid: an RFC 4122 UUID in lower case).
var uidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// CheckUID refuses a claim UID that is not the API server's UID form
// before it becomes part of a file name: a "../" in it would reach files
// outside the CDI directory.
func CheckUID(uid types.UID) error {
	if !uidPattern.MatchString(string(uid)) {
		const max = 64
		v := string(uid)
		if len(v) > max {
			v = v[:max] + "..."
		}
		return fmt.Errorf("claim UID %q is not a UID; want the API server's form, 8-4-4-4-12 lower-case hex digits", v)
	}
	return nil
}

// specStore keeps one CDI spec file per claim UID in a directory: the
// driver's only state, so a restarted agent (or the other instance of a
// rolling update) sees what is prepared. Every method refuses a UID that
// is not one (CheckUID) before it touches a path.
type specStore struct {
	dir string
	// seen caches the holds of spec files by name, valid while the file's
	// size and modification time stay; nil disables it.
	seen *holderCache
}

type holderCache struct {
	mu    sync.Mutex
	files map[string]cachedHolders
}

type cachedHolders struct {
	size    int64
	modTime time.Time
	holds   holds
}

const specPrefix = contract.DRADriverName + "-" + CDIClass + "_"

func (s specStore) path(claim types.UID) string {
	return filepath.Join(s.dir, specPrefix+string(claim)+".json")
}

// uidOf is the claim UID a spec file of this store is named after.
func uidOf(fileName string) (types.UID, bool) {
	uid, ok := strings.CutPrefix(fileName, specPrefix)
	if !ok {
		return "", false
	}
	uid, ok = strings.CutSuffix(uid, ".json")
	return types.UID(uid), ok && CheckUID(types.UID(uid)) == nil
}

// write replaces the claim's spec atomically: a runtime reading the
// directory sees the old file or the new one, never a part.
func (s specStore) write(claim types.UID, spec *cdispec.Spec) error {
	if err := CheckUID(claim); err != nil {
		return err
	}
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
	if err := CheckUID(claim); err != nil {
		return nil, err
	}
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
	if err := CheckUID(claim); err != nil {
		return err
	}
	if err := os.Remove(s.path(claim)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove CDI spec of claim %s: %w", claim, err)
	}
	return nil
}

// holders returns the holds of every prepared claim by its UID.
func (s specStore) holders() (map[types.UID]holds, error) {
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
	out := map[types.UID]holds{}
	present := map[string]bool{}
	for _, e := range entries {
		uid, ok := uidOf(e.Name())
		if !ok {
			continue
		}
		present[e.Name()] = true
		h, ok := s.holdsOf(e, uid)
		if !ok {
			continue // gone meanwhile, or not ours to judge
		}
		out[uid] = h
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

// holdsOf returns what the spec file e holds, from the cache when the file
// has not changed since it was read.
func (s specStore) holdsOf(e os.DirEntry, uid types.UID) (holds, bool) {
	info, err := e.Info()
	if err != nil {
		return holds{}, false
	}
	if s.seen != nil {
		if c, ok := s.seen.files[e.Name()]; ok && c.size == info.Size() && c.modTime.Equal(info.ModTime()) {
			return c.holds, true
		}
	}
	spec, err := s.read(uid)
	if err != nil || spec == nil {
		return holds{}, false
	}
	h := holdsFromSpec(spec)
	if s.seen != nil {
		s.seen.files[e.Name()] = cachedHolders{size: info.Size(), modTime: info.ModTime(), holds: h}
	}
	return h, true
}
