//go:build fleet

package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
)

func isExists(err error) bool { return apierrors.IsAlreadyExists(err) }

// deviceClasses are the chart's (templates/dra-deviceclasses.yaml): one per
// pool, selecting the driver's devices by pool, serving the pool's
// extended resource name.
func deviceClasses() []*resourceapi.DeviceClass {
	var out []*resourceapi.DeviceClass
	for name, res := range map[string]string{
		contract.DeviceClassIB: contract.ExtendedResourceIB, contract.DeviceClassSharedIB: contract.ExtendedResourceSharedIB,
		contract.DeviceClassRoCE: contract.ExtendedResourceRoCE,
	} {
		out = append(out, &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceClassSpec{
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf(
					"device.driver == %q && device.attributes[%q].pool == %q", contract.DRADriverName, contract.DRADriverName, res)}}},
				ExtendedResourceName: ptr.To(res),
			},
		})
	}
	return out
}

const (
	templateOne  = "one-ib"
	templateNUMA = "two-ib-one-numa"
)

// claimTemplates: one exclusive HCA; two exclusive HCAs on one NUMA node
// (docs/dra.md's matchAttribute on the standard numaNode attribute).
func claimTemplates() []*resourceapi.ResourceClaimTemplate {
	req := func(n int64) resourceapi.DeviceRequest {
		return resourceapi.DeviceRequest{Name: "hcas", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: contract.DeviceClassIB, Count: n}}
	}
	return []*resourceapi.ResourceClaimTemplate{
		{ObjectMeta: metav1.ObjectMeta{Name: templateOne}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req(1)}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: templateNUMA}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{
				Requests:    []resourceapi.DeviceRequest{req(2)},
				Constraints: []resourceapi.DeviceConstraint{{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(deviceattribute.StandardDeviceAttributeNUMANode))}},
			}}}},
	}
}

// workload is one kind of pod the throughput phase schedules.
type workload struct {
	name, mode string
	pod        func(name string) *corev1.Pod
}

func basePod(name, mode string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "fleet"}},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{labelMode: mode},
			Tolerations:                   []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
			Containers:                    []corev1.Container{{Name: "c", Image: "fake"}},
		},
	}
}

func withResource(p *corev1.Pod, name string, n int64) *corev1.Pod {
	q := *resourceQuantity(n)
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceName(name): q}
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceName(name): q}
	return p
}

func withClaim(p *corev1.Pod, template string) *corev1.Pod {
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "hcas", ResourceClaimTemplateName: ptr.To(template)}}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "hcas"}}
	return p
}

func workloads() []workload {
	return []workload{
		{"deviceplugin-extended", contract.AllocationDevicePlugin, func(n string) *corev1.Pod {
			return withResource(basePod(n, contract.AllocationDevicePlugin), contract.ResourceExclusiveIB, 1)
		}},
		{"dra-extended", contract.AllocationDRA, func(n string) *corev1.Pod {
			return withResource(basePod(n, contract.AllocationDRA), contract.ExtendedResourceIB, 1)
		}},
		{"dra-claim", contract.AllocationDRA, func(n string) *corev1.Pod { return withClaim(basePod(n, contract.AllocationDRA), templateOne) }},
		{"dra-claim-numa", contract.AllocationDRA, func(n string) *corev1.Pod {
			return withClaim(basePod(n, contract.AllocationDRA), templateNUMA)
		}},
	}
}

// capacity of the fleet for a workload: how many of its pods fit at once.
func (f *fleet) capacity(w workload) int {
	// ND H100 v5: two NUMA nodes of four HCAs, so eight exclusive HCAs
	// and four pairs on one NUMA node; split pools keep mlx5_7 (NUMA
	// node 1) for the sharers: seven and three.
	ndExclusive, ndPairs := 8, 4
	if f.s.pools == "split" {
		ndExclusive, ndPairs = 7, 3
	}
	total := 0
	for _, n := range f.nodes {
		if n.mode != w.mode {
			continue
		}
		switch n.machine.fixture {
		case "ndv5":
			if w.name == "dra-claim-numa" {
				total += ndPairs
			} else {
				total += ndExclusive
			}
		case "hb":
			if w.name != "dra-claim-numa" {
				total++
			}
		}
	}
	return total
}

// throughput creates each workload's pods in one burst and measures how
// fast the scheduler binds them: pods / (last bound - first created). The
// workloads run one after another on the same fleet, each cleaned up
// before the next.
func (f *fleet) throughput(t *testing.T) {
	f.report.Throughput = map[string]throughputResult{}
	for _, w := range workloads() {
		n := min(f.s.pods, f.capacity(w)*9/10)
		res := f.burst(t, workNS, n, func(i int) *corev1.Pod { return w.pod(fmt.Sprintf("%s-%05d", w.name, i)) })
		f.report.Throughput[w.name] = res
		t.Logf("throughput %s: %d pods bound in %.1fs: %.1f pods/s (%d unschedulable at the end)", w.name, res.Pods, res.Seconds, res.PodsPerSecond, res.Unbound)
		if res.Unbound > 0 {
			t.Errorf("%s: %d of %d pods never bound", w.name, res.Unbound, res.Pods)
		}
		f.deletePods(t, workNS, "app=fleet")
	}
}

type throughputResult struct {
	Pods          int
	Seconds       float64
	PodsPerSecond float64
	Unbound       int
	// FailedScheduling counts the scheduler's FailedScheduling events for
	// the burst's pods (each one an attempt that found no node, as the
	// event recorder aggregates them); Reasons holds a few distinct ones.
	FailedScheduling int
	Reasons          []string
}

// burst creates n pods made by pod (labelled app=fleet) in ns from 32
// clients at once and measures how fast the scheduler binds them.
func (f *fleet) burst(t *testing.T, ns string, n int, pod func(i int) *corev1.Pod) throughputResult {
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Minute)
	defer cancel()
	bound := make(chan time.Time, n)
	go func() {
		seen := map[string]bool{}
		for ctx.Err() == nil {
			wt, err := f.admin.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "app=fleet"})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range wt.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if ok && ev.Type != watch.Deleted && p.Spec.NodeName != "" && !seen[p.Name] {
					seen[p.Name] = true
					bound <- time.Now()
				}
			}
			wt.Stop()
		}
	}()
	start := time.Now()
	var failed atomic.Int64
	forEach(n, 32, func(i int) {
		p := pod(i)
		if _, err := f.admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			failed.Add(1)
			t.Errorf("create %s: %v", p.Name, err)
		}
	})
	want := n - int(failed.Load())
	var last time.Time
	got := 0
	idle := time.NewTimer(2 * time.Minute)
	for got < want {
		select {
		case at := <-bound:
			got++
			last = at
			idle.Reset(2 * time.Minute)
		case <-idle.C:
			want = got
		}
	}
	secs := last.Sub(start).Seconds()
	res := throughputResult{Pods: n, Unbound: n - got}
	if got > 0 {
		res.Seconds, res.PodsPerSecond = secs, float64(got)/secs
	}
	res.FailedScheduling, res.Reasons = f.failedScheduling(ns, start)
	return res
}

// failedScheduling sums the FailedScheduling events in ns since start and
// returns a few distinct messages.
func (f *fleet) failedScheduling(ns string, since time.Time) (int, []string) {
	evs, err := f.admin.CoreV1().Events(ns).List(f.ctx, metav1.ListOptions{FieldSelector: "reason=FailedScheduling"})
	if err != nil {
		return 0, []string{err.Error()}
	}
	n := 0
	seen := map[string]bool{}
	var reasons []string
	for _, e := range evs.Items {
		last := e.LastTimestamp.Time
		if e.Series != nil {
			last = e.Series.LastObservedTime.Time
		}
		if last.IsZero() {
			last = e.EventTime.Time
		}
		if last.Before(since) {
			continue
		}
		c := int(e.Count)
		if e.Series != nil {
			c = max(c, int(e.Series.Count))
		}
		n += max(1, c)
		if !seen[e.Message] && len(reasons) < 3 {
			seen[e.Message] = true
			reasons = append(reasons, e.Message)
		}
	}
	return n, reasons
}

// deletePods deletes the selected pods and waits until they and their
// generated claims are gone (KWOK finishes a pod's deletion).
func (f *fleet) deletePods(t *testing.T, ns, selector string) {
	err := retryTransient(f.ctx, "delete pods "+selector+" in "+ns, 5, 5*time.Second, func() error {
		return f.admin.CoreV1().Pods(ns).DeleteCollection(f.ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}, metav1.ListOptions{LabelSelector: selector})
	})
	if err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, "pods and their claims deleted", 5*time.Minute, func() (bool, string) {
		pods, err := f.admin.CoreV1().Pods(ns).List(f.ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		claims, err := f.admin.ResourceV1().ResourceClaims(ns).List(f.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0 && len(claims.Items) == 0, fmt.Sprintf("%d pods, %d claims left", len(pods.Items), len(claims.Items))
	})
}

// publishedWatch notes, per node, when the API first showed its devices:
// a DRA node's slices holding every device its fixture has, a
// device-plugin node's allocatable rdma resources.
type publishedWatch struct {
	mu     sync.Mutex
	first  map[string]time.Time
	cancel context.CancelFunc
	// fromList: nodes the watches missed, timed from the API's records;
	// late: nodes whose first event came late, timed the same way.
	fromList, late int
}

func (p *publishedWatch) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.first)
}

func (p *publishedWatch) at(node string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.first[node]
}

func (p *publishedWatch) stop() { p.cancel() }

// mark notes node's devices as published at the API server's record of
// it (recorded: a slice's creation, the agent's status write; 1 s
// resolution) when the event comes more than lateAfter after it, as the
// first events of a watch the API server closed and the harness reopened
// do, else when the event came.
func (p *publishedWatch) mark(node string, recorded time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.first[node]; !ok {
		at := time.Now()
		if !recorded.IsZero() && at.Sub(recorded) > lateAfter {
			at = recorded
			p.late++
		}
		p.first[node] = at
	}
}

// lateAfter: an event this long after the API's record of what it shows
// came late (the record has a resolution of one second).
const lateAfter = 2 * time.Second

// agentStatusWrite is when the agent last wrote the Node's status (the
// simulated kubelet's capacity patch, through the agent's client).
func agentStatusWrite(n *corev1.Node) time.Time {
	var at time.Time
	for _, m := range n.ManagedFields {
		if m.Subresource == "status" && strings.HasPrefix(m.Manager, "ibkube-node-agent") && m.Time != nil {
			at = m.Time.Time
		}
	}
	return at
}

// publishedFromList fills in the nodes the watches have not shown (a watch
// the API server closed on a starved client, for instance) from what the
// API server recorded: a DRA node's slices' creation time (its first
// publication: the latest over its slices), a device-plugin node's last
// status write by its agent (the one capacity patch of its start). Both have
// a resolution of one second.
func (f *fleet) publishedFromList(p *publishedWatch) {
	slices, err := f.admin.ResourceV1().ResourceSlices().List(f.ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	created := map[string]time.Time{}
	for _, s := range slices.Items {
		if s.Spec.NodeName == nil || len(s.Spec.Devices) == 0 {
			continue
		}
		if c := s.CreationTimestamp.Time; c.After(created[*s.Spec.NodeName]) {
			created[*s.Spec.NodeName] = c
		}
	}
	nodes, err := f.admin.CoreV1().Nodes().List(f.ctx, metav1.ListOptions{LabelSelector: labelMode + "=" + contract.AllocationDevicePlugin})
	if err != nil {
		return
	}
	for i := range nodes.Items {
		if at := agentStatusWrite(&nodes.Items[i]); !at.IsZero() {
			created[nodes.Items[i].Name] = at
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, at := range created {
		if _, ok := p.first[name]; !ok {
			p.first[name] = at
			p.fromList++
		}
	}
}

func (f *fleet) watchPublished(since time.Time) *publishedWatch {
	ctx, cancel := context.WithCancel(f.ctx)
	p := &publishedWatch{first: map[string]time.Time{}, cancel: cancel}
	go rewatch(ctx, func(ctx context.Context) (watch.Interface, error) {
		return f.admin.ResourceV1().ResourceSlices().Watch(ctx, metav1.ListOptions{})
	}, func(ev watch.Event) {
		s, ok := ev.Object.(*resourceapi.ResourceSlice)
		if ok && ev.Type != watch.Deleted && s.Spec.NodeName != nil && len(s.Spec.Devices) > 0 {
			p.mark(*s.Spec.NodeName, s.CreationTimestamp.Time)
		}
	})
	go rewatch(ctx, func(ctx context.Context) (watch.Interface, error) {
		return f.admin.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: labelMode + "=" + contract.AllocationDevicePlugin})
	}, func(ev watch.Event) {
		n, ok := ev.Object.(*corev1.Node)
		if !ok {
			return
		}
		for r := range n.Status.Allocatable {
			if strings.HasPrefix(string(r), "rdma/") {
				p.mark(n.Name, agentStatusWrite(n))
				return
			}
		}
	})
	return p
}

// measureStorage: ibkube's objects as stored (protobuf, as etcd holds them)
// and the etcd database size.
func (f *fleet) measureStorage(t *testing.T, when string) {
	raw, err := f.admin.ResourceV1().RESTClient().Get().AbsPath("/apis/resource.k8s.io/v1/resourceslices").
		SetHeader("Accept", "application/vnd.kubernetes.protobuf").DoRaw(f.ctx)
	if err != nil {
		t.Errorf("list slices as protobuf: %v", err)
	}
	slices, err := f.admin.ResourceV1().ResourceSlices().List(f.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := storage{When: when, Slices: len(slices.Items), SliceBytes: len(raw)}
	if m, err := f.admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(f.ctx); err == nil {
		st.EtcdDBBytes = metricValue(string(m), "apiserver_storage_size_bytes")
	}
	f.report.Storage = append(f.report.Storage, st)
	t.Logf("storage (%s): %d ResourceSlices, %d bytes as protobuf; etcd database %d bytes", when, st.Slices, st.SliceBytes, st.EtcdDBBytes)
}

type storage struct {
	When        string
	Slices      int
	SliceBytes  int
	EtcdDBBytes int64
}

// metricValue sums the samples of a Prometheus metric in text exposition.
func metricValue(text, name string) int64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		fields := strings.Fields(line)
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			sum += v
		}
	}
	return int64(sum)
}

// apiserverRSS reads the API server's resident memory (fleet.sh's pid file).
func apiserverRSS(dir string) int64 {
	b, err := os.ReadFile(filepath.Join(dir, "pids", "kube-apiserver.pid"))
	if err != nil {
		return 0
	}
	status, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(b)), "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

type machineInfo struct {
	CPUs      int
	MemoryGiB float64
	Load1     string
	Kernel    string
}

func machineFacts() machineInfo {
	m := machineInfo{CPUs: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.Load1 = strings.Fields(string(b))[0]
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
				m.MemoryGiB = kb / (1 << 20)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}
