package dra

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/node/dra/holds"
	"github.com/ibkube/ibkube/node/resource"
)

// Publisher is where the driver's ResourceSlice content goes
// (*kubeletplugin.Helper).
type Publisher interface {
	PublishResources(ctx context.Context, resources resourceslice.DriverResources) error
}

// Config is what the driver needs from the agent.
type Config struct {
	// NodeName is the Kubernetes node: the ResourceSlice pool's name.
	NodeName string
	// CDIDir is where Prepare writes the claims' CDI specs (DefaultCDIDir);
	// the container runtime must read CDI specs from it.
	CDIDir string
	// PCIeRoot resolves another driver's device's PCI address to its PCIe
	// root complex (the HCAs' come with the inventory); nil: unknown.
	PCIeRoot func(pciAddress string) (string, error)
	// Now is the clock of the health reports and of slice publishing; nil
	// is time.Now.
	Now func() time.Time
	// RecoverHold is how long an HCA stays tainted in the slice after it
	// is healthy again (0: DefaultRecoverHold); MinPublishInterval spaces
	// slice writes that add no taint (0: DefaultMinPublishInterval).
	RecoverHold, MinPublishInterval time.Duration
	// Events receives the node's Events (a slice the API server refused,
	// stale CDI specs removed); nil only logs them.
	Events NodeEvents
	// Metrics is where the driver registers its series; nil registers none.
	Metrics prometheus.Registerer
	// Claims reads ResourceClaims, to remove CDI specs whose claims are
	// gone (ReconcileCDI) at start and every ReconcilePeriod (0:
	// DefaultReconcilePeriod); nil disables that. It should be a client of
	// its own, not the one Prepare and the slices use: ReconcileLimiter
	// (nil: DefaultReconcileQPS, DefaultReconcileBurst) paces its reads.
	Claims           ClaimsGetter
	ReconcilePeriod  time.Duration
	ReconcileLimiter RateLimiter
	// Slices lists ResourceSlices, where Prepare reads the places of a
	// claim's GPUs for the pairs it reports (pairs_prepare.go); NUMANode
	// reads a PCI device's NUMA node (NUMANode under the sysfs root).
	// Nil: a GPU's place is what its slice says, or unknown. PodEvents
	// receives the Warning Event of an aligned claim whose pairs fell
	// back; nil sends none.
	Slices    DeviceSlices
	NUMANode  func(pciAddress string) (int, error)
	PodEvents PodEvents
	// Plugin is what Run needs to serve the kubelet.
	Plugin PluginOptions
}

// NodeEvents sends Warning Events about the node (the binary builds it
// from its event recorder).
type NodeEvents interface {
	NodeEvent(reason, message string)
}

// Driver is the DRA plugin: Update feeds it the agent's resource model after
// every scan, and kubeletplugin calls it to prepare claims and watch health.
type Driver struct {
	cfg   Config
	log   logr.Logger
	store specStore

	metrics *metrics
	// view is the node's slices as the slice controller's informer saw
	// them (Published).
	view *sliceView

	mu        sync.Mutex
	model     *resource.Model
	publisher Publisher
	damper    damper
	// published is what the publisher last got, at lastWrite; retry looks
	// again when a write was held back or a taint's hold ends.
	published *resourceslice.DriverResources
	lastWrite time.Time
	retry     *time.Timer
	retryAt   time.Time
	health    kubeletplugin.DeviceHealthReport
	// healthChanged is closed, and replaced, when health changes.
	healthChanged chan struct{}
	// fatal receives errors HandleError deems fatal; Run returns the first.
	fatal chan error
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// New returns a driver with an empty model; Update gives it one.
func New(cfg Config, log logr.Logger) (*Driver, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("DRA driver: no node name (--node-name or $NODE_NAME); the ResourceSlice pool is named after the node")
	}
	if cfg.CDIDir == "" {
		cfg.CDIDir = DefaultCDIDir
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RecoverHold == 0 {
		cfg.RecoverHold = DefaultRecoverHold
	}
	if cfg.MinPublishInterval == 0 {
		cfg.MinPublishInterval = DefaultMinPublishInterval
	}
	if cfg.ReconcilePeriod == 0 {
		cfg.ReconcilePeriod = DefaultReconcilePeriod
	}
	if cfg.ReconcileLimiter == nil {
		cfg.ReconcileLimiter = flowcontrol.NewTokenBucketRateLimiter(DefaultReconcileQPS, DefaultReconcileBurst)
	}
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("DRA driver metrics: %w", err)
	}
	return &Driver{
		cfg: cfg, log: log, store: specStore{dir: cfg.CDIDir, seen: &holds.Cache{}}, metrics: m, view: newSliceView(cfg.NodeName),
		model: &resource.Model{}, damper: damper{hold: cfg.RecoverHold},
		healthChanged: make(chan struct{}), fatal: make(chan error, 1),
	}, nil
}

// Update takes a new resource model: it republishes the slices when a
// publisher is attached, and wakes the health watchers when a device's
// health changed.
func (d *Driver) Update(m *resource.Model) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.model = m
	health := Health(m, d.cfg.NodeName, d.cfg.Now())
	if !sameHealth(d.health, health) {
		close(d.healthChanged)
		d.healthChanged = make(chan struct{})
	}
	d.health = health
	d.publishLocked()
}

// publishLocked hands the slice controller the current model when the
// publishing rules allow it (publish.go), and otherwise arranges to look
// again when they will.
func (d *Driver) publishLocked() {
	if d.publisher == nil {
		return
	}
	now := d.cfg.Now()
	held, holdEnds := d.damper.observe(d.model, now)
	res := Resources(d.model, NodeFacts{Name: d.cfg.NodeName, Held: held})
	write, retryAt := publishDecision(res, d.published, d.lastWrite, now, d.cfg.MinPublishInterval)
	if write {
		if err := d.publisher.PublishResources(context.Background(), res); err != nil {
			d.log.Error(err, "publish ResourceSlices")
		}
		d.published, d.lastWrite = &res, now
		d.metrics.publishes.Inc()
	}
	if !holdEnds.IsZero() && (retryAt.IsZero() || holdEnds.Before(retryAt)) {
		retryAt = holdEnds
	}
	if d.retry != nil {
		d.retry.Stop()
	}
	d.retryAt = retryAt
	if retryAt.IsZero() {
		return
	}
	d.retry = time.AfterFunc(max(retryAt.Sub(now), time.Millisecond), func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.publishLocked()
	})
}

// attach publishes the current model through p and every later one; nil
// detaches.
func (d *Driver) attach(p Publisher) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.publisher = p
	d.published = nil
	if p == nil && d.retry != nil {
		d.retry.Stop()
	}
	d.publishLocked()
}

func (d *Driver) snapshot() *resource.Model {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.model
}

// sameHealth compares reports without their timestamps.
func sameHealth(a, b kubeletplugin.DeviceHealthReport) bool {
	return slices.EqualFunc(a.Devices, b.Devices, func(x, y kubeletplugin.DeviceHealth) bool {
		return x.PoolName == y.PoolName && x.DeviceName == y.DeviceName && x.Health == y.Health && x.Message == y.Message
	})
}

// PrepareResourceClaims writes each claim's CDI spec and returns its CDI
// device IDs. A claim whose spec is already there (the kubelet asks again
// after a restart of either side) gets the same answer without a rewrite,
// even if its HCAs have since gone from the model.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	m := d.snapshot()
	for _, c := range claims {
		if err := holds.CheckUID(c.UID); err != nil {
			d.log.Error(err, "prepare claim", "claim", claimRef(c))
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		devs, err := d.prepare(ctx, m, c)
		if err != nil {
			d.log.Error(err, "prepare claim", "claim", claimRef(c), "uid", c.UID)
		}
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devs, Err: err}
	}
	return out, nil
}

func (d *Driver) prepare(ctx context.Context, m *resource.Model, c *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	if c.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s is not allocated", claimRef(c))
	}
	var results []resourceapi.DeviceRequestAllocationResult
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == contract.DRADriverName {
			results = append(results, r)
		}
	}
	answer := make([]kubeletplugin.Device, 0, len(results))
	for _, r := range results {
		answer = append(answer, kubeletplugin.Device{
			Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
			CDIDeviceIDs: []string{CDIDeviceID(c.UID, r.Request)}, ShareID: r.ShareID,
		})
	}
	if len(results) == 0 {
		return answer, nil // nothing of this driver's: no spec to write
	}
	fingerprint := AllocationFingerprint(results)
	existing, err := d.store.read(c.UID)
	if err != nil {
		return nil, err
	}
	if existing != nil && sameAllocation(existing, fingerprint) {
		return answer, nil
	}
	if existing != nil {
		d.log.Info("rewriting the CDI spec of an earlier allocation of the claim", "claim", claimRef(c), "uid", c.UID,
			"was", existing.Annotations[annotationAllocation], "now", fingerprint)
	}
	reqs, err := d.requests(m, results)
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", claimRef(c), err)
	}
	if err := d.checkHolds(m, c, reqs); err != nil {
		return nil, err
	}
	spec, err := ClaimSpec(c.UID, claimRef(c), reqs)
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", claimRef(c), err)
	}
	pairs := d.reportPairs(ctx, reqs, c.Status.Allocation.Devices.Results, spec)
	spec.Annotations[annotationAllocation] = fingerprint
	if err := d.store.write(c.UID, spec); err != nil {
		return nil, err
	}
	d.alignmentEvent(m, c, pairs)
	return answer, nil
}

// requests groups this driver's allocation results by request, with the
// model's device for each.
func (d *Driver) requests(m *resource.Model, results []resourceapi.DeviceRequestAllocationResult) ([]Request, error) {
	var reqs []Request
	for _, r := range results {
		if r.Pool != d.cfg.NodeName {
			return nil, fmt.Errorf("device %s is in pool %q; this node's pool is %q", r.Device, r.Pool, d.cfg.NodeName)
		}
		dev, err := lookup(m, r.Device)
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(reqs, func(q Request) bool { return q.Name == r.Request })
		if i < 0 {
			reqs = append(reqs, Request{Name: r.Request, AdminAccess: ptr.Deref(r.AdminAccess, false)})
			i = len(reqs) - 1
		}
		reqs[i].Devices = append(reqs[i].Devices, dev)
	}
	return reqs, nil
}

// checkHolds refuses an HCA that another prepared claim holds
// exclusively, and an exclusive hold on an HCA another claim holds in any
// way. The scheduler cannot allocate either (the HCA's shared counter); the
// driver is the last place that can notice a slice published without it or
// an allocation made before it. Devices are compared by HCA: an exclusive
// and a shared device of one HCA are two names for one piece of hardware.
func (d *Driver) checkHolds(m *resource.Model, c *resourceapi.ResourceClaim, reqs []Request) error {
	want := holdsOf(reqs)
	if len(want.Exclusive)+len(want.Shared) == 0 {
		return nil
	}
	l, err := d.store.holders()
	if err != nil {
		return err
	}
	for _, uid := range slices.Sorted(maps.Keys(l.Holds)) {
		if uid == c.UID {
			continue
		}
		other := l.Holds[uid]
		otherExclusive := other.ExclusiveHCAs(m)
		for _, hca := range want.Exclusive {
			if slices.Contains(otherExclusive, hca) || slices.Contains(other.Shared, hca) {
				return fmt.Errorf("claim %s: HCA %s is already prepared for claim %s; an exclusive claim needs it alone", claimRef(c), hca, uid)
			}
		}
		for _, hca := range want.Shared {
			if slices.Contains(otherExclusive, hca) {
				return fmt.Errorf("claim %s: HCA %s is already prepared for claim %s, which holds it exclusively", claimRef(c), hca, uid)
			}
		}
	}
	return nil
}

func claimRef(c *resourceapi.ResourceClaim) string { return c.Namespace + "/" + c.Name }

// UnprepareResourceClaims removes the claims' CDI specs; a claim never
// prepared here, or already unprepared, is fine.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = d.store.remove(c.UID) // refuses a UID that is not one
	}
	return out, nil
}

// HandleError logs errors of the background work (publishing slices, the
// gRPC servers); a fatal one stops Run. An error of the slice controller
// (the API server refused a slice, or stored it without some fields) is
// also counted and sent as a Warning Event on the node: the slices the
// API holds are then not what the node has.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	if sliceError(err, msg) {
		d.metrics.sliceErrors.Inc()
		d.nodeEvent(ReasonSliceRejected, fmt.Sprintf("%s: %v", msg, err))
	}
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		d.log.Error(err, msg)
		return
	}
	select {
	case d.fatal <- fmt.Errorf("%s: %w", msg, err):
	default:
	}
}

// ReasonSliceRejected is the reason of the node's Event when the slice
// controller could not store the node's ResourceSlices as published.
const ReasonSliceRejected = "ResourceSliceRejected"

// sliceError says whether a background error comes from the slice
// controller (k8s.io/dynamic-resource-allocation/resourceslice, whose
// messages name ResourceSlices or the pool).
func sliceError(err error, msg string) bool {
	var dropped *resourceslice.DroppedFieldsError
	return errors.As(err, &dropped) || strings.Contains(msg, "ResourceSlice") || strings.Contains(msg, "pool validation")
}

func (d *Driver) nodeEvent(reason, message string) {
	if d.cfg.Events == nil {
		return
	}
	d.cfg.Events.NodeEvent(reason, message)
}

// WatchHealthStatus sends the health of every device now, again whenever
// it changes, and every HealthResend in between so the kubelet's view does
// not go stale.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	tick := time.NewTicker(HealthResend)
	defer tick.Stop()
	for {
		d.mu.Lock()
		report, changed := d.health, d.healthChanged
		d.mu.Unlock()
		report.Devices = slices.Clone(report.Devices)
		now := d.cfg.Now()
		for i := range report.Devices {
			report.Devices[i].LastUpdated = now
		}
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}
