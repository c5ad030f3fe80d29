package counters

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ibkube/ibkube/contract"
)

// ReasonJobSplit is the Event reason on a pod whose job runs on more than
// one InfiniBand partition.
const ReasonJobSplit = "RDMAJobSplit"

// MetricJobPartitions is the number of partitions a job's running RDMA
// pods are on, exported by every node running one of them.
const MetricJobPartitions = "ibkube_rdma_job_partitions"

// Jobs reads what the split-job check needs from the API server; the
// binary builds it from its API client.
type Jobs interface {
	// PodLabels are the labels of a pod on this node.
	PodLabels(ctx context.Context, namespace, name string) (map[string]string, error)
	// RunningPods are the running pods in namespace matching selector.
	RunningPods(ctx context.Context, namespace string, selector map[string]string) ([]JobPod, error)
	// NodePartition is the node's infiniband.azure.com/partition label, ""
	// when it has none.
	NodePartition(ctx context.Context, node string) (string, error)
}

// JobPod is one running pod of a job.
type JobPod struct {
	Name, Node string
	// RDMA: ibkube injected an rdma mode (its injected annotation).
	RDMA bool
}

// RDMAPod says whether a pod's annotations show an rdma mode injected.
func RDMAPod(annotations map[string]string) bool {
	return strings.HasPrefix(annotations[contract.AnnotationInjected], "mode=rdma-")
}

// Unlabelled stands for a node without a partition label in messages.
const Unlabelled = "(no partition label)"

// JobSplit is a job whose running RDMA pods sit on several partitions.
type JobSplit struct {
	Namespace string
	Job       string // "label=value" of the job's selector
	// Nodes by partition, each list sorted.
	Nodes map[string][]string
}

// Partitions is the sorted list of the partitions the job is on.
func (s JobSplit) Partitions() []string {
	out := make([]string, 0, len(s.Nodes))
	for p := range s.Nodes {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Message is the Event's text.
func (s JobSplit) Message() string {
	var parts []string
	for _, p := range s.Partitions() {
		parts = append(parts, fmt.Sprintf("%s (nodes %s)", p, strings.Join(s.Nodes[p], ", ")))
	}
	return fmt.Sprintf("job %s in namespace %s runs on %d InfiniBand partitions: %s; its pods on different partitions cannot reach each other over InfiniBand "+
		"(NCCL hangs or falls back to sockets): delete the job's pods so they are placed again on one partition (docs/partitions.md)",
		s.Job, s.Namespace, len(s.Nodes), strings.Join(parts, "; "))
}

// FindSplit groups a job's running RDMA pods by the partition of their
// node; partitions maps node to its label.
func FindSplit(namespace, job string, pods []JobPod, partitions map[string]string) JobSplit {
	s := JobSplit{Namespace: namespace, Job: job, Nodes: map[string][]string{}}
	for _, p := range pods {
		if !p.RDMA || p.Node == "" {
			continue
		}
		part := partitions[p.Node]
		if part == "" {
			part = Unlabelled
		}
		if !slices.Contains(s.Nodes[part], p.Node) {
			s.Nodes[part] = append(s.Nodes[part], p.Node)
		}
	}
	for _, n := range s.Nodes {
		sort.Strings(n)
	}
	return s
}

// selectorString is "k=v,k2=v2", sorted: a job's name in messages and keys.
func selectorString(sel map[string]string) string {
	keys := make([]string, 0, len(sel))
	for k := range sel {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + sel[k]
	}
	return strings.Join(parts, ",")
}

// splitWatch is the split-job check's memory across readings.
type splitWatch struct {
	// jobs of the local pods ("ns/pod"), the zero jobRef for a pod of no
	// job.
	jobs map[string]jobRef
	// firstSeen and checked per job key ("ns/selector").
	firstSeen, checked map[string]time.Time
	// told is the last message sent per local pod.
	told map[string]string
	// last is each job's partition count at its last check.
	last map[string]jobCount
}

type jobCount struct {
	namespace, job string
	partitions     int
}

func newSplitWatch() splitWatch {
	return splitWatch{jobs: map[string]jobRef{}, firstSeen: map[string]time.Time{}, checked: map[string]time.Time{},
		told: map[string]string{}, last: map[string]jobCount{}}
}

// Split checks pace themselves: every reading while a job is young (its
// pods start over a few minutes), then every splitSettledEvery, so that
// every node listing every job's pods each period does not load the API
// server of a large cluster.
const (
	splitYoung        = 5 * time.Minute
	splitSettledEvery = 5 * time.Minute
)

// checkSplits looks at the jobs of the pods holding devices here and sends
// an Event on each local pod of a job found on several partitions.
func (m *Monitor) checkSplits(ctx context.Context, now time.Time, holders []Holder) {
	if m.cfg.Jobs == nil {
		return
	}
	local, refs := m.localJobs(ctx, holders)
	m.split.forgetGone(local)
	nodes := map[string]string{}
	for key, pods := range local {
		m.checkJob(ctx, now, key, refs[key], pods, nodes)
	}
}

// localJobs groups the pods holding devices here by job (namespace/selector
// -> local pods), reading each pod's labels once in its life, and forgets
// the pods gone.
func (m *Monitor) localJobs(ctx context.Context, holders []Holder) (local map[string][]string, refs map[string]jobRef) {
	w := &m.split
	local = map[string][]string{}
	refs = map[string]jobRef{}
	present := map[string]bool{}
	for _, h := range holders {
		id := h.Namespace + "/" + h.Pod
		if present[id] {
			continue
		}
		present[id] = true
		ref, known := w.jobs[id]
		if !known {
			labels, err := m.cfg.Jobs.PodLabels(ctx, h.Namespace, h.Pod)
			if err != nil {
				m.log.V(1).Info("cannot read the pod's labels; its job is not checked", "pod", id, "error", err.Error())
				continue
			}
			ref = jobOf(labels)
			w.jobs[id] = ref
		}
		if ref.selector == nil {
			continue
		}
		key := h.Namespace + "/" + selectorString(ref.selector)
		local[key] = append(local[key], h.Pod)
		refs[key] = ref
	}
	for id := range w.jobs {
		if !present[id] {
			delete(w.jobs, id)
			delete(w.told, id)
		}
	}
	return local, refs
}

// forgetGone forgets the jobs with no local pod left.
func (w *splitWatch) forgetGone(local map[string][]string) {
	for key := range w.firstSeen {
		if _, ok := local[key]; !ok {
			delete(w.firstSeen, key)
			delete(w.checked, key)
			delete(w.last, key)
		}
	}
}

// checkJob reads the partitions of the job key (its local pods are pods)
// while it is young and every splitSettledEvery after, and tells each
// local pod once about a split it has not been told of.
func (m *Monitor) checkJob(ctx context.Context, now time.Time, key string, ref jobRef, pods []string, nodes map[string]string) {
	w := &m.split
	if _, ok := w.firstSeen[key]; !ok {
		w.firstSeen[key] = now
	}
	young := now.Sub(w.firstSeen[key]) < splitYoung
	if c, ok := w.checked[key]; ok && !young && now.Sub(c) < splitSettledEvery {
		return
	}
	w.checked[key] = now
	ns := strings.SplitN(key, "/", 2)[0]
	s, err := m.jobSplit(ctx, ns, ref, nodes)
	if err != nil {
		m.log.V(1).Info("cannot check the job's partitions", "job", key, "error", err.Error())
		return
	}
	w.last[key] = jobCount{namespace: ns, job: s.Job, partitions: len(s.Nodes)}
	if len(s.Nodes) < 2 {
		return
	}
	msg := s.Message()
	for _, pod := range pods {
		id := ns + "/" + pod
		if w.told[id] == msg {
			continue
		}
		w.told[id] = msg
		m.log.Info("job split across InfiniBand partitions", "pod", id, "job", s.Job, "partitions", s.Partitions())
		if m.cfg.Events != nil {
			m.cfg.Events.PodEvent(PodInfo{Namespace: ns, Name: pod}, ReasonJobSplit, msg)
		}
	}
}

// jobSplit reads the job's running pods and their nodes' partitions
// (nodes caches the partitions read in this reading).
func (m *Monitor) jobSplit(ctx context.Context, ns string, job jobRef, nodes map[string]string) (JobSplit, error) {
	pods, err := m.cfg.Jobs.RunningPods(ctx, ns, job.selector)
	if err != nil {
		return JobSplit{}, err
	}
	for _, p := range pods {
		if _, ok := nodes[p.Node]; ok || !p.RDMA || p.Node == "" {
			continue
		}
		part, err := m.cfg.Jobs.NodePartition(ctx, p.Node)
		if err != nil {
			return JobSplit{}, err
		}
		nodes[p.Node] = part
	}
	return FindSplit(ns, job.name, pods, nodes), nil
}

// jobRef is a job as the split check lists and names it.
type jobRef struct {
	// selector is the job's label and its controller's UID labels
	// (contract.JobUIDKeys), as the partition affinity selects the job once
	// the API server has merged its matchLabelKeys: a pod that copies only
	// the job's name is not counted as the job's.
	selector map[string]string
	// name is the job label's "label=value", the job's name in Events and
	// in the metric's job_name.
	name string
}

// jobOf is the job of a pod with these labels, the zero jobRef for none.
func jobOf(labels map[string]string) jobRef {
	named := contract.JobSelector(labels)
	if named == nil {
		return jobRef{}
	}
	sel := make(map[string]string, len(named)+2)
	for k, v := range named {
		sel[k] = v
	}
	for _, k := range contract.JobUIDKeys(labels) {
		sel[k] = labels[k]
	}
	return jobRef{selector: sel, name: selectorString(named)}
}

var descJobPartitions = prometheus.NewDesc(MetricJobPartitions,
	"InfiniBand partitions the running RDMA pods of a job are on (job_name is the job's label selector), for each job with a pod holding RDMA devices on this node; above 1 the job is split and its ranks cannot all reach each other.",
	[]string{"job_namespace", "job_name"}, nil)

// counts is the partition count of every job checked.
func (w *splitWatch) counts() []jobCount {
	out := make([]jobCount, 0, len(w.last))
	for _, c := range w.last {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].namespace+out[i].job < out[j].namespace+out[j].job })
	return out
}
