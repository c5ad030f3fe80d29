package counters

import (
	"context"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/ibkube/ibkube/node/resource"
)

// Container is one container as the kubelet's PodResources API lists it,
// with the devices it was given.
type Container struct {
	Namespace, Pod, Container string
	// Devices maps a resource name to the device IDs allocated from it
	// (device plugins).
	Devices map[string][]string
	// Claimed are the DRA devices of the claims the container uses, as
	// DRAKey names them (the kubelet lists every device of such a claim
	// for each container that uses it).
	Claimed []string
}

// DRAKey names a DRA device as the PodResources API identifies it: by
// driver, pool and device name.
func DRAKey(driver, pool, device string) string { return driver + "/" + pool + "/" + device }

// Lister lists the containers that hold devices (the kubelet's PodResources
// List; a fake in tests).
type Lister interface {
	List(ctx context.Context) ([]Container, error)
}

// PoolView is what attribution needs of a resource pool: whether devices
// are whole HCAs (exclusive, device ID = HCA name) or slots over HCAs
// shared with other containers.
type PoolView struct {
	Exclusive bool
	HCAs      []string
	// Grants maps a shared slot to the HCAs the device plugin gave it
	// (it leaves out HCAs held exclusively); a slot missing here is
	// taken to reach every HCA of the pool.
	Grants map[string][]string
}

// PoolViews is the device plugins' side of an Attribution: for each pool
// of model, by its resource name, whether it is exclusive, the HCAs it
// serves and grants[resource], the shared slots' recorded grants (nil:
// unknown, each slot taken to reach every HCA).
func PoolViews(model *resource.Model, grants map[string]map[string][]string) map[string]PoolView {
	out := make(map[string]PoolView, len(model.Pools))
	for _, p := range model.Pools {
		v := PoolView{Exclusive: p.Exclusive(), Grants: grants[p.Resource]}
		for _, h := range p.HCAs {
			v.HCAs = append(v.HCAs, h.Name)
		}
		out[p.Resource] = v
	}
	return out
}

// DRADevice is a device the agent's DRA driver publishes: one HCA, given
// to one claim (exclusive) or to many.
type DRADevice struct {
	HCA       string
	Exclusive bool
}

// Attribution is what maps a container's devices to HCAs: the device
// plugin pools by resource name, the DRA devices by DRAKey.
type Attribution struct {
	Pools map[string]PoolView
	DRA   map[string]DRADevice
}

// Holder is a container and the HCAs it holds.
type Holder struct {
	Namespace, Pod, Container string
	// Exclusive are HCAs this container alone holds: their traffic is its.
	Exclusive []string
	// Shared are the HCAs behind shared slots it holds: their traffic is
	// the sum of every container sharing them, so none of it can be
	// attributed to this one.
	Shared []string
}

// ID is "namespace/pod/container".
func (h Holder) ID() string { return h.Namespace + "/" + h.Pod + "/" + h.Container }

// HCAs is every HCA the holder can reach, sorted.
func (h Holder) HCAs() []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range append(append([]string(nil), h.Exclusive...), h.Shared...) {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Holders maps containers to the HCAs of this agent's pools and DRA
// devices. Containers holding nothing of them (GPUs only, another plugin's
// resources) are left out; device IDs an exclusive pool does not know (an
// HCA gone since allocation) are kept: the container still holds them.
func Holders(containers []Container, a Attribution) []Holder {
	var out []Holder
	for _, c := range containers {
		h := Holder{Namespace: c.Namespace, Pod: c.Pod, Container: c.Container}
		for res, ids := range c.Devices {
			pv, ok := a.Pools[res]
			if !ok || len(ids) == 0 {
				continue
			}
			if pv.Exclusive {
				h.Exclusive = append(h.Exclusive, ids...)
				continue
			}
			for _, id := range ids {
				if hcas, ok := pv.Grants[id]; ok {
					h.Shared = append(h.Shared, hcas...)
				} else {
					h.Shared = append(h.Shared, pv.HCAs...)
				}
			}
		}
		for _, key := range c.Claimed {
			d, ok := a.DRA[key]
			switch {
			case !ok:
			case d.Exclusive:
				h.Exclusive = append(h.Exclusive, d.HCA)
			default:
				h.Shared = append(h.Shared, d.HCA)
			}
		}
		if len(h.Exclusive)+len(h.Shared) == 0 {
			continue
		}
		h.Exclusive = sortedUnique(h.Exclusive)
		h.Shared = sortedUnique(h.Shared)
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID() < out[j].ID() })
	return out
}

// ExclusiveOwners maps each exclusively held HCA to its holder.
func ExclusiveOwners(hs []Holder) map[string]Holder {
	out := map[string]Holder{}
	for _, h := range hs {
		for _, n := range h.Exclusive {
			out[n] = h
		}
	}
	return out
}

func sortedUnique(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	sort.Strings(s)
	out := s[:1]
	for _, v := range s[1:] {
		if v != out[len(out)-1] {
			out = append(out, v)
		}
	}
	return out
}

// PodResourcesSocket is where the kubelet serves the PodResources API
// (k8s.io/kubelet/pkg/apis/podresources; kubelet's
// --pod-resources-directory defaults to /var/lib/kubelet/pod-resources).
const PodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// PodResourcesLister lists containers over the kubelet's PodResources v1 API.
type PodResourcesLister struct {
	conn   *grpc.ClientConn
	client podresourcesv1.PodResourcesListerClient
	// Timeout bounds one List call.
	Timeout time.Duration
}

// NewPodResourcesLister connects lazily to the kubelet's unix socket.
func NewPodResourcesLister(socket string) (*PodResourcesLister, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("pod resources client for %s: %w", socket, err)
	}
	return &PodResourcesLister{conn: conn, client: podresourcesv1.NewPodResourcesListerClient(conn), Timeout: 10 * time.Second}, nil
}

// Close closes the connection.
func (l *PodResourcesLister) Close() error { return l.conn.Close() }

// List implements Lister.
func (l *PodResourcesLister) List(ctx context.Context) ([]Container, error) {
	ctx, cancel := context.WithTimeout(ctx, l.Timeout)
	defer cancel()
	resp, err := l.client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("kubelet pod resources List: %w", err)
	}
	return FromPodResources(resp.GetPodResources()), nil
}

// FromPodResources flattens the kubelet's answer.
func FromPodResources(pods []*podresourcesv1.PodResources) []Container {
	var out []Container
	for _, p := range pods {
		for _, c := range p.GetContainers() {
			cont := Container{Namespace: p.GetNamespace(), Pod: p.GetName(), Container: c.GetName()}
			for _, d := range c.GetDevices() {
				if cont.Devices == nil {
					cont.Devices = map[string][]string{}
				}
				cont.Devices[d.GetResourceName()] = append(cont.Devices[d.GetResourceName()], d.GetDeviceIds()...)
			}
			for _, dr := range c.GetDynamicResources() {
				for _, r := range dr.GetClaimResources() {
					cont.Claimed = append(cont.Claimed, DRAKey(r.GetDriverName(), r.GetPoolName(), r.GetDeviceName()))
				}
			}
			if cont.Devices != nil || cont.Claimed != nil {
				out = append(out, cont)
			}
		}
	}
	return out
}
