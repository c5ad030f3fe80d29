package dra

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/atomicfile"
	"github.com/ibkube/ibkube/node/dra/holds"
	"github.com/ibkube/ibkube/node/resource"
)

// CDI names. A CDI device ID is "<kind>=<name>" (the CDI spec's
// "vendor.com/class=name"); the driver's name is the vendor.
const (
	CDIClass      = holds.CDIClass
	CDIKind       = contract.DRADriverName + "/" + CDIClass
	DefaultCDIDir = holds.DefaultCDIDir
)

// Annotations of a claim's CDI spec: what Unprepare and the next Prepare
// need after the claim object and this process are gone, besides the HCAs
// it holds (holds.Holds.Annotate).
const (
	annotationClaim = contract.DRADriverName + "/claim"
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
// devices, rdma_cm) and the node's NCCL topology file, as the device
// plugin's Allocate gives them, with NCCL_IB_HCA and UCX_NET_DEVICES naming
// the HCAs of all the claim's requests of the same pool (claimLists).
func ClaimSpec(claim types.UID, ref string, reqs []Request) (*cdispec.Spec, error) {
	spec := &cdispec.Spec{Kind: CDIKind, Annotations: map[string]string{annotationClaim: ref}}
	grants := make([]resource.Grant, len(reqs))
	for i, r := range reqs {
		g, err := requestGrant(r.Devices)
		if err != nil {
			return nil, fmt.Errorf("request %q: %w", r.Name, err)
		}
		grants[i] = g
	}
	claimLists(reqs, grants)
	for i, r := range reqs {
		spec.Devices = append(spec.Devices, cdispec.Device{Name: CDIDeviceName(claim, r.Name), ContainerEdits: containerEdits(grants[i])})
	}
	holdsOf(reqs).Annotate(spec.Annotations)
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, err
	}
	spec.Version = v
	return spec, nil
}

// claimLists sets the port lists (NCCL_IB_HCA, UCX_NET_DEVICES) of every
// request's grant to those of all the claim's requests that draw from the
// same pool. A container that references the claim gets one CDI device per
// request, each setting those variables, and the runtime keeps the last
// value of a repeated variable (the CDI library's env edits), so
// per-request lists would leave a claim of one request per HCA (the aligned
// GPU+HCA claim) naming one HCA to NCCL. Requests of another pool (an
// IPoIB share beside exclusive HCAs) keep their own lists: their HCAs serve
// another purpose, and NCCL should not spread over them.
func claimLists(reqs []Request, grants []resource.Grant) {
	merged := map[*resource.Pool]*resource.Grant{}
	for i, r := range reqs {
		p := requestPool(r)
		if merged[p] == nil {
			merged[p] = &resource.Grant{}
		}
		merged[p].Merge(resource.Grant{Env: grants[i].Env})
	}
	for i, r := range reqs {
		all := merged[requestPool(r)].Env
		for j, e := range grants[i].Env {
			if e.Name != resource.EnvNCCLIBHCA && e.Name != resource.EnvUCXNetDevices {
				continue
			}
			if k := slices.IndexFunc(all, func(x resource.EnvVar) bool { return x.Name == e.Name }); k >= 0 {
				grants[i].Env[j].Value = all[k].Value
			}
		}
	}
}

// requestPool is the pool a request draws from (its DeviceClass selects
// one); nil for a request without devices.
func requestPool(r Request) *resource.Pool {
	if len(r.Devices) == 0 {
		return nil
	}
	return r.Devices[0].Pool
}

// requestGrant merges what each pool grants for its part of the devices
// (resource.Grant.Merge); a request normally draws from one pool (its
// DeviceClass selects one).
func requestGrant(devs []Device) (resource.Grant, error) {
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
			return resource.Grant{}, err
		}
		grant.Merge(g)
	}
	return grant, nil
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

// holdsOf is what a claim's requests hold: the HCAs of its exclusive-pool
// devices exclusively, those of its shared-pool devices as a sharer; an
// admin-access request holds nothing.
func holdsOf(reqs []Request) holds.Holds {
	var h holds.Holds
	for _, r := range reqs {
		if r.AdminAccess {
			continue
		}
		for _, d := range r.Devices {
			list := &h.Shared
			if d.Pool.Exclusive() {
				list = &h.Exclusive
			}
			if !slices.Contains(*list, d.HCA.Name) {
				*list = append(*list, d.HCA.Name)
			}
		}
	}
	sort.Strings(h.Exclusive)
	sort.Strings(h.Shared)
	return h
}

// specStore keeps one CDI spec file per claim UID in a directory: the
// driver's only state, so a restarted agent (or the other instance of a
// rolling update) sees what is prepared. Every method refuses a UID that
// is not one (holds.CheckUID) before it touches a path.
type specStore struct {
	dir string
	// seen caches the holds of spec files; nil disables it.
	seen *holds.Cache
}

func (s specStore) path(claim types.UID) string { return holds.SpecPath(s.dir, claim) }

// write replaces the claim's spec atomically: a runtime reading the
// directory sees the old file or the new one, never a part.
func (s specStore) write(claim types.UID, spec *cdispec.Spec) error {
	if err := holds.CheckUID(claim); err != nil {
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
	if err := holds.CheckUID(claim); err != nil {
		return nil, err
	}
	spec, err := holds.ReadSpec(s.path(claim))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", claim, err)
	}
	return spec, nil
}

func (s specStore) remove(claim types.UID) error {
	if err := holds.CheckUID(claim); err != nil {
		return err
	}
	if err := os.Remove(s.path(claim)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove CDI spec of claim %s: %w", claim, err)
	}
	return nil
}

// holders lists the holds of every prepared claim; a spec that cannot be
// read holds nothing here (holds.Listing.Unreadable).
func (s specStore) holders() (holds.Listing, error) { return holds.List(s.dir, s.seen) }
