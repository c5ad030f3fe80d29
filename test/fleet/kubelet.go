//go:build fleet

package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/node/resource"
)

// kubeletCapacity stands for the device plugin gRPC servers and the
// kubelet of a device-plugin node: the kubelet reads each pool's devices
// from ListAndWatch and writes the healthy count into the Node's capacity
// and allocatable at its next status update (nodeStatusUpdateFrequency,
// 10 s). The device list is the agent's real model (the Pool's Devices, what
// ListAndWatch sends); the gRPC hop and the kubelet are simulated, and the
// status patch goes through the agent's client so it counts as the node's
// traffic.
type kubeletCapacity struct {
	node   string
	cs     kubernetes.Interface
	period time.Duration
	log    logr.Logger

	mu   sync.Mutex
	want map[string]int64
}

func (k *kubeletCapacity) Update(m *resource.Model) {
	want := map[string]int64{}
	for _, p := range m.Pools {
		var healthy int64
		for _, d := range p.Devices() {
			if d.Health == "Healthy" {
				healthy++
			}
		}
		want[p.Resource] = healthy
	}
	k.mu.Lock()
	k.want = want
	k.mu.Unlock()
}

func (k *kubeletCapacity) Run(ctx context.Context) error {
	var sent map[string]int64
	t := time.NewTicker(k.period)
	defer t.Stop()
	for {
		k.mu.Lock()
		want := k.want
		k.mu.Unlock()
		if want != nil && !maps.Equal(want, sent) {
			if err := k.patch(ctx, want); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				k.log.Error(err, "node status")
			} else {
				sent = want
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (k *kubeletCapacity) patch(ctx context.Context, want map[string]int64) error {
	list := map[string]string{}
	for r, v := range want {
		list[r] = apiresource.NewQuantity(v, apiresource.DecimalSI).String()
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{"capacity": list, "allocatable": list}})
	if err != nil {
		return err
	}
	_, err = k.cs.CoreV1().Nodes().Patch(ctx, k.node, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
	return err
}

// draKubelet is the kubelet side of the DRA nodes: it wipes a node's
// ResourceSlices wipeDelay after its driver went away unless another
// registered meanwhile (the kubelet's defaultWipingDelay), and prepares the
// claims of pods bound to the node through the live driver's
// PrepareResourceClaims (the kubelet's NodePrepareResources, without the
// gRPC hop), retrying while no driver serves the node as the kubelet does.
type draKubelet struct {
	f         *fleet
	wipeDelay time.Duration
	giveUp    time.Duration

	mu       sync.Mutex
	pods     map[types.UID]*podPrep
	wiped    int
	prepared []time.Duration // bind seen -> prepared
	stranded []string
	boundOff int // pods bound while their node's driver was down
	// unprepare holds the claims of pods deleted while their node's driver
	// was down: the kubelet retries NodeUnprepareResources until it can.
	unprepare map[*simNode][]kubeletplugin.NamespacedObject
}

type podPrep struct {
	pod      *corev1.Pod
	node     *simNode
	seen     time.Time
	wasDown  bool
	done     bool
	claimIDs []kubeletplugin.NamespacedObject
}

func newDRAKubelet(f *fleet) *draKubelet {
	return &draKubelet{f: f, wipeDelay: 30 * time.Second, giveUp: 60 * time.Second, pods: map[types.UID]*podPrep{}, unprepare: map[*simNode][]kubeletplugin.NamespacedObject{}}
}

// run wipes and prepares until ctx ends.
func (k *draKubelet) run(ctx context.Context, namespace string) {
	go k.wipeLoop(ctx)
	go k.prepareLoop(ctx)
	rewatch(ctx, func(ctx context.Context) (watch.Interface, error) {
		return k.f.admin.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{})
	}, func(ev watch.Event) {
		if pod, ok := ev.Object.(*corev1.Pod); ok {
			k.observe(ctx, ev.Type, pod)
		}
	})
}

func (k *draKubelet) observe(ctx context.Context, t watch.EventType, pod *corev1.Pod) {
	if len(pod.Spec.ResourceClaims) == 0 || pod.Spec.NodeName == "" {
		return
	}
	n := k.f.byName[pod.Spec.NodeName]
	if n == nil || n.mode != contract.AllocationDRA {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	p := k.pods[pod.UID]
	if t == watch.Deleted || pod.DeletionTimestamp != nil {
		if p != nil && p.done && len(p.claimIDs) > 0 {
			k.unprepare[n] = append(k.unprepare[n], p.claimIDs...)
		}
		delete(k.pods, pod.UID)
		return
	}
	if p == nil {
		// Down for a second already: the scheduler's decision came after
		// the agent had gone, not before it while the watch event was on
		// its way.
		n.mu.Lock()
		down := n.current == nil && !n.downSince.IsZero() && time.Since(n.downSince) > time.Second
		n.mu.Unlock()
		p = &podPrep{pod: pod, node: n, seen: time.Now(), wasDown: down}
		if p.wasDown {
			k.boundOff++
		}
		k.pods[pod.UID] = p
	} else {
		p.pod = pod
	}
}

func (k *draKubelet) prepareLoop(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		k.mu.Lock()
		var todo []*podPrep
		for _, p := range k.pods {
			if !p.done {
				todo = append(todo, p)
			}
		}
		for n, ids := range k.unprepare {
			if r := n.live(); r != nil {
				if _, err := r.driver.UnprepareResourceClaims(ctx, ids); err == nil {
					delete(k.unprepare, n)
				}
			}
		}
		k.mu.Unlock()
		for _, p := range todo {
			k.prepare(ctx, p)
		}
	}
}

func (k *draKubelet) prepare(ctx context.Context, p *podPrep) {
	r := p.node.live()
	var err error
	var ids []kubeletplugin.NamespacedObject
	if r == nil {
		err = fmt.Errorf("DRA driver %s is not registered on node %s", contract.DRADriverName, p.node.name)
	} else {
		ids, err = k.prepareClaims(ctx, r, p.pod)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err == nil {
		p.done, p.claimIDs = true, ids
		k.prepared = append(k.prepared, time.Since(p.seen))
		if _, still := k.pods[p.pod.UID]; !still {
			// Deleted while being prepared: the kubelet unprepares it.
			k.unprepare[p.node] = append(k.unprepare[p.node], ids...)
		}
		return
	}
	if time.Since(p.seen) > k.giveUp {
		p.done = true
		k.stranded = append(k.stranded, fmt.Sprintf("%s/%s on %s: %v", p.pod.Namespace, p.pod.Name, p.node.name, err))
	}
}

func (k *draKubelet) prepareClaims(ctx context.Context, r *agentRun, pod *corev1.Pod) ([]kubeletplugin.NamespacedObject, error) {
	var claims []*resourceapi.ResourceClaim
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName == nil {
			continue
		}
		c, err := k.f.admin.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *s.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		claims = append(claims, c)
	}
	if len(claims) != len(pod.Spec.ResourceClaims) {
		return nil, fmt.Errorf("pod %s: %d of %d claims known", pod.Name, len(claims), len(pod.Spec.ResourceClaims))
	}
	res, err := r.driver.PrepareResourceClaims(ctx, claims)
	if err != nil {
		return nil, err
	}
	var ids []kubeletplugin.NamespacedObject
	for _, c := range claims {
		if e := res[c.UID].Err; e != nil {
			return nil, e
		}
		ids = append(ids, kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: c.UID})
	}
	return ids, nil
}

func (k *draKubelet) wipeLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	wiped := map[string]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, n := range k.f.nodes {
			if n.mode != contract.AllocationDRA {
				continue
			}
			n.mu.Lock()
			down := n.downSince
			off := n.current == nil
			n.mu.Unlock()
			if !off || down.IsZero() || time.Since(down) < k.wipeDelay || wiped[n.name] == down {
				continue
			}
			wiped[n.name] = down
			sel := fields.Set{resourceapi.ResourceSliceSelectorNodeName: n.name, resourceapi.ResourceSliceSelectorDriver: contract.DRADriverName}
			if err := k.f.admin.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: sel.String()}); err == nil {
				k.mu.Lock()
				k.wiped++
				k.mu.Unlock()
			}
		}
	}
}

// snapshot returns what the kubelet side saw since the last reset.
func (k *draKubelet) snapshot() (prepared []time.Duration, stranded []string, boundOff, wiped, pending int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.pods {
		if !p.done {
			pending++
		}
	}
	return append([]time.Duration(nil), k.prepared...), append([]string(nil), k.stranded...), k.boundOff, k.wiped, pending
}

func (k *draKubelet) reset() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.prepared, k.stranded, k.boundOff, k.wiped = nil, nil, 0, 0
}
