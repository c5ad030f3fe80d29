package dra

import (
	"context"
	"slices"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	resourcev1 "k8s.io/client-go/kubernetes/typed/resource/v1"
	"k8s.io/client-go/util/watchlist"

	"github.com/ibkube/ibkube/contract"
)

// sliceView is what the kubeletplugin slice controller's informer has seen
// of this node's ResourceSlices: the agent's readiness and its planned exit
// wait on it instead of listing the slices themselves. At 1,000 nodes
// those lists by field selector were a request per node every 2 s while
// the fleet started, and Ready lagged the slices by ~45 s at p50; the
// informer's watch already carries every slice the controller writes.
type sliceView struct {
	node string

	mu sync.Mutex
	// devices holds each slice's device keys (deviceKeys) by slice name.
	devices map[string][]string
	// pages gathers a paginated list until its last page.
	pages []resourceapi.ResourceSlice
	// changed is closed, and replaced, on every change.
	changed chan struct{}
}

func newSliceView(node string) *sliceView {
	return &sliceView{node: node, devices: map[string][]string{}, changed: make(chan struct{})}
}

// ours says whether s is one of this node's slices of this driver: the
// controller's field selector asks only for those, but a client that
// ignores field selectors (a fake) sends them all.
func (v *sliceView) ours(s *resourceapi.ResourceSlice) bool {
	return s.Spec.Driver == contract.DRADriverName && s.Spec.NodeName != nil && *s.Spec.NodeName == v.node && s.Spec.Pool.Name == v.node
}

// page takes one page of a list: the whole view once the last page is in.
func (v *sliceView) page(items []resourceapi.ResourceSlice, first, last bool) {
	v.mu.Lock()
	if first {
		v.pages = nil
	}
	v.pages = append(v.pages, items...)
	all := v.pages
	if last {
		v.pages = nil
	}
	v.mu.Unlock()
	if last {
		v.replace(all)
	}
}

// replace takes a list's items as the whole view.
func (v *sliceView) replace(items []resourceapi.ResourceSlice) {
	v.mu.Lock()
	defer v.mu.Unlock()
	clear(v.devices)
	for i := range items {
		if v.ours(&items[i]) {
			v.devices[items[i].Name] = deviceKeys(items[i].Spec.Devices)
		}
	}
	v.notifyLocked()
}

// event applies one watch event.
func (v *sliceView) event(e watch.Event) {
	s, ok := e.Object.(*resourceapi.ResourceSlice)
	if !ok {
		return // a bookmark or an error status
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case e.Type == watch.Deleted || !v.ours(s):
		// A slice that stops being ours (it cannot: driver, node and pool
		// are immutable) would leave it too.
		delete(v.devices, s.Name)
	case e.Type == watch.Added || e.Type == watch.Modified:
		v.devices[s.Name] = deviceKeys(s.Spec.Devices)
	default:
		return
	}
	v.notifyLocked()
}

// reset forgets everything: a watch that sends the initial state as events
// (watch-list) starts over.
func (v *sliceView) reset() { v.replace(nil) }

func (v *sliceView) notifyLocked() {
	close(v.changed)
	v.changed = make(chan struct{})
}

// snapshot is the sorted device keys of every slice seen, and a channel
// closed on the next change.
func (v *sliceView) snapshot() ([]string, <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for _, keys := range v.devices {
		out = append(out, keys...)
	}
	slices.Sort(out)
	return out, v.changed
}

// observedClient is the API client the kubeletplugin helper gets: the
// client itself, with the ResourceSlice lists and watches of its slice
// controller's informer seen by view on their way.
type observedClient struct {
	kubernetes.Interface
	view *sliceView
}

// IsWatchListSemanticsUnSupported passes on what the client says of
// watch-list (a fake cannot): the reflector asks it, and would otherwise
// wait for an initial-events bookmark that never comes.
func (c observedClient) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(c.Interface)
}

func (c observedClient) ResourceV1() resourcev1.ResourceV1Interface {
	return observedResourceV1{ResourceV1Interface: c.Interface.ResourceV1(), view: c.view}
}

type observedResourceV1 struct {
	resourcev1.ResourceV1Interface
	view *sliceView
}

func (c observedResourceV1) ResourceSlices() resourcev1.ResourceSliceInterface {
	return observedSlices{ResourceSliceInterface: c.ResourceV1Interface.ResourceSlices(), view: c.view}
}

type observedSlices struct {
	resourcev1.ResourceSliceInterface
	view *sliceView
}

func (c observedSlices) List(ctx context.Context, opts metav1.ListOptions) (*resourceapi.ResourceSliceList, error) {
	list, err := c.ResourceSliceInterface.List(ctx, opts)
	if err == nil {
		c.view.page(list.Items, opts.Continue == "", list.Continue == "")
	}
	return list, err
}

func (c observedSlices) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := c.ResourceSliceInterface.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		c.view.reset()
	}
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		c.view.event(e)
		return e, true
	}), nil
}
