//go:build fleet

package fleet

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/suitetest"
)

const (
	admitNS    = "fleet-admit"
	baselineNS = "fleet-baseline"
	webhookNS  = "ibkube-system"
	webhookSvc = "ibkube-webhook"
)

// The webhook replicas' addresses in the control plane's namespace
// (test/fleet/fleet.sh WEBHOOK_IPS).
var webhookIPs = []string{"198.18.16.11", "198.18.16.12"}

func resourceQuantity(n int64) *apiresource.Quantity {
	return apiresource.NewQuantity(n, apiresource.DecimalSI)
}

// admitPod is an annotated GPU pod as a training job's would be; it is
// kept off the nodes (a selector no node has) so that only admission is
// measured.
func admitPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "admit"}, Annotations: map[string]string{
			contract.AnnotationMode: "rdma-exclusive", contract.AnnotationProfile: "ndv5",
		}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"ibkube.io/fleet-admission-only": "true"},
			Containers: []corev1.Container{{Name: "trainer", Image: "fake", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{"nvidia.com/gpu": *resourceQuantity(8)},
			}}},
		},
	}
}

// admission measures the webhook (two replicas, run as processes by
// fleet.sh) and then policy mode: the admission rate and the create
// latency a burst sees against a namespace that is not opted in, and the
// pods refused or admitted unmutated while one replica is killed every 30 s.
func (f *fleet) admission(t *testing.T) {
	res := admissionResult{PacedRate: pacedRate}
	base := f.admitBurst(t, baselineNS, "base")
	res.Baseline = base
	res.BaselinePaced = f.admitPaced(t, baselineNS, "basep")
	f.webhookUp(t)
	res.Webhook = f.admitBurst(t, admitNS, "wh")
	res.Webhook.AddedP99Ms = res.Webhook.LatencyMs.P99 - base.LatencyMs.P99
	res.WebhookPaced = f.admitPaced(t, admitNS, "whp")
	res.WebhookPaced.AddedP99Ms = res.WebhookPaced.LatencyMs.P99 - res.BaselinePaced.LatencyMs.P99
	if !f.s.admissionOnly {
		f.partitionAffinity(t)
	}
	res.Kill = f.killReplicas(t, replicaDeleted)
	res.Crash = f.killReplicas(t, replicaCrashed)
	f.webhookDown(t)
	// Policy mode is compared with a baseline taken again just before it:
	// the webhook phases ran minutes (at 1,000 nodes, a flap storm and a
	// rollout) after the first one, and the control plane's state moves.
	res.BaselineAgain = f.admitBurst(t, baselineNS, "base2")
	res.BaselinePacedAgain = f.admitPaced(t, baselineNS, "basep2")
	f.policyFloorUp(t)
	res.PolicyFloor = f.admitBurst(t, floorNS, "floor")
	res.PolicyFloor.AddedP99Ms = res.PolicyFloor.LatencyMs.P99 - res.BaselineAgain.LatencyMs.P99
	res.PolicyFloorPaced = f.admitPaced(t, floorNS, "floorp")
	res.PolicyFloorPaced.AddedP99Ms = res.PolicyFloorPaced.LatencyMs.P99 - res.BaselinePacedAgain.LatencyMs.P99
	f.policyFloorDown(t)
	f.policyUp(t)
	res.Policy = f.admitBurst(t, admitNS, "pol")
	res.Policy.AddedP99Ms = res.Policy.LatencyMs.P99 - res.BaselineAgain.LatencyMs.P99
	res.PolicyPaced = f.admitPaced(t, admitNS, "polp")
	res.PolicyPaced.AddedP99Ms = res.PolicyPaced.LatencyMs.P99 - res.BaselinePacedAgain.LatencyMs.P99
	f.report.Admission = res
	t.Logf("admission bursts: baseline %.0f pods/s p99 %.1f ms; webhook %.0f pods/s +%.1f ms p99; baseline again %.0f pods/s p99 %.1f ms; policy %.0f pods/s +%.1f ms p99",
		base.PodsPerSecond, base.LatencyMs.P99, res.Webhook.PodsPerSecond, res.Webhook.AddedP99Ms,
		res.BaselineAgain.PodsPerSecond, res.BaselineAgain.LatencyMs.P99, res.Policy.PodsPerSecond, res.Policy.AddedP99Ms)
	t.Logf("admission at %.0f pods/s: baseline p99 %.1f ms; webhook +%.1f ms p99; baseline again p99 %.1f ms; one-operation policy +%.1f ms p99; policy +%.1f ms p99",
		pacedRate, res.BaselinePaced.LatencyMs.P99, res.WebhookPaced.AddedP99Ms, res.BaselinePacedAgain.LatencyMs.P99, res.PolicyFloorPaced.AddedP99Ms, res.PolicyPaced.AddedP99Ms)
	t.Logf("one-operation policy: burst %.0f pods/s +%.1f ms p99", res.PolicyFloor.PodsPerSecond, res.PolicyFloor.AddedP99Ms)
	t.Logf("CPU per pod in the bursts (kube-apiserver + webhook replicas): baseline %.2f ms; webhook %.2f + %.2f ms; baseline again %.2f ms; one-operation policy %.2f ms; policy %.2f ms",
		base.APIServerCPUPerPodMs, res.Webhook.APIServerCPUPerPodMs, res.Webhook.WebhookCPUPerPodMs, res.BaselineAgain.APIServerCPUPerPodMs,
		res.PolicyFloor.APIServerCPUPerPodMs, res.Policy.APIServerCPUPerPodMs)
	t.Logf("CPU per pod at %.0f pods/s over the paced baseline's (%.2f ms, again %.2f ms): webhook %.2f + %.2f ms replicas; one-operation policy %.2f ms; policy %.2f ms",
		pacedRate, res.BaselinePaced.APIServerCPUPerPodMs, res.BaselinePacedAgain.APIServerCPUPerPodMs,
		res.WebhookPaced.APIServerCPUPerPodMs-res.BaselinePaced.APIServerCPUPerPodMs, res.WebhookPaced.WebhookCPUPerPodMs,
		res.PolicyFloorPaced.APIServerCPUPerPodMs-res.BaselinePacedAgain.APIServerCPUPerPodMs,
		res.PolicyPaced.APIServerCPUPerPodMs-res.BaselinePacedAgain.APIServerCPUPerPodMs)
	for _, k := range []killResult{res.Kill, res.Crash} {
		t.Logf("webhook replica taken down every 30 s (%s, %d times): %d refused, %d unmutated of %d; %v",
			k.Fault, k.Kills, k.Refused, k.Unmutated, k.Pods, k.Errors)
	}
	for name, b := range map[string]burstResult{"webhook": res.Webhook, "policy": res.Policy, "webhook paced": res.WebhookPaced, "policy paced": res.PolicyPaced} {
		if b.Refused+b.Unmutated > 0 {
			t.Errorf("%s burst: %d refused, %d unmutated of %d", name, b.Refused, b.Unmutated, b.Pods)
		}
	}
	if res.Kill.Refused+res.Kill.Unmutated > 0 {
		t.Errorf("while webhook replicas were deleted: %d refused, %d unmutated of %d (goal 0)", res.Kill.Refused, res.Kill.Unmutated, res.Kill.Pods)
	}
	// A SIGKILLed replica refuses the admissions the API server sends it
	// before its address leaves the endpoints: the API server does not
	// retry a webhook call whose connection was refused or reset
	// (k8s.io/apiserver admission/plugin/webhook/mutating dispatcher), and
	// the chart's failurePolicy is Fail. The figure is reported; a pod
	// admitted unmutated would be ibkube's fault and fails the run.
	if res.Crash.Unmutated > 0 {
		t.Errorf("while webhook replicas were SIGKILLed: %d of %d pods admitted unmutated (goal 0)", res.Crash.Unmutated, res.Crash.Pods)
	}
}

type admissionResult struct {
	// Bursts: 32 clients at once, the highest rate the control plane
	// takes; latencies include the queueing.
	// BaselineAgain is measured right before PolicyFloor (a one-operation
	// MutatingAdmissionPolicy, the API server's own cost of any policy)
	// and Policy, which are compared with it.
	Baseline, Webhook, BaselineAgain, PolicyFloor, Policy burstResult
	// Paced: pacedRate pods per second, what admission adds to one create.
	PacedRate                                                                      float64
	BaselinePaced, WebhookPaced, BaselinePacedAgain, PolicyFloorPaced, PolicyPaced burstResult
	// Kill: replicas deleted as pods are; Crash: replicas SIGKILLed.
	Kill, Crash killResult
}

// pacedRate is well below what this control plane takes in a burst.
const pacedRate = 20.0

// admitPaced creates pods at pacedRate per second for 10 s (smoke) or 30 s
// and measures each create's latency.
func (f *fleet) admitPaced(t *testing.T, ns, prefix string) burstResult {
	secs := 30
	if f.s.smoke {
		secs = 10
	}
	n := int(pacedRate) * secs
	var tally admissionTally
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Duration(float64(time.Second) / pacedRate))
	defer tick.Stop()
	api0, hooks0 := f.admissionCPU(t)
	start := time.Now()
	for i := range n {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			tally.create(f, ns, fmt.Sprintf("%s-%05d", prefix, i))
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	api1, hooks1 := f.admissionCPU(t)
	f.deletePods(t, ns, "app=admit")
	r := tally.result(n, el)
	r.cpuPerPod(api1-api0, hooks1-hooks0)
	return r
}

// admissionTally counts what the API server made of admission pods
// created concurrently: each create's latency when admitted, the refused,
// and in the admission namespace the admitted but unmutated.
type admissionTally struct {
	mu                 sync.Mutex
	lat                []float64
	refused, unmutated atomic.Int64
}

// create creates one admission pod and counts the outcome.
func (a *admissionTally) create(f *fleet, ns, name string) {
	t0 := time.Now()
	got, err := f.admin.CoreV1().Pods(ns).Create(f.ctx, admitPod(name), metav1.CreateOptions{})
	d := time.Since(t0)
	if err != nil {
		a.refused.Add(1)
		return
	}
	if ns == admitNS && got.Annotations[contract.AnnotationInjected] == "" {
		a.unmutated.Add(1)
	}
	a.mu.Lock()
	a.lat = append(a.lat, float64(d.Microseconds())/1000)
	a.mu.Unlock()
}

// result is the tally of n creates over secs seconds.
func (a *admissionTally) result(n int, secs float64) burstResult {
	return burstResult{Pods: n, Refused: int(a.refused.Load()), Unmutated: int(a.unmutated.Load()), Seconds: secs,
		PodsPerSecond: float64(n) / secs, LatencyMs: pct(a.lat)}
}

type burstResult struct {
	Pods, Refused, Unmutated int
	Seconds, PodsPerSecond   float64
	LatencyMs                percentiles
	AddedP99Ms               float64
	// APIServerCPUPerPodMs and WebhookCPUPerPodMs are the CPU time
	// (utime+stime) kube-apiserver and the webhook replicas together spent
	// during a burst or a paced phase, per pod: what admission costs the
	// control plane, the webhook's part running on its own nodes in a
	// real cluster. A burst keeps this machine's API server busy
	// throughout, so its figure grows with the burst's length whatever
	// the work (the background the API server runs meanwhile counts per
	// pod); the paced phases last the same 30 s on every path, and the
	// difference from the paced baseline is what admission adds.
	APIServerCPUPerPodMs, WebhookCPUPerPodMs float64
}

type killResult struct {
	Fault                           string
	Pods, Refused, Unmutated, Kills int
	Seconds                         float64
	Errors                          []string
}

// admitBurst creates s.pods pods (at least 200) from 32 clients at once
// and measures each create's latency.
func (f *fleet) admitBurst(t *testing.T, ns, prefix string) burstResult {
	n := max(200, min(f.s.pods, 2000))
	if f.s.smoke {
		n = 100
	}
	var tally admissionTally
	profiled := f.profileAPIServer(t, prefix)
	api0, hooks0 := f.admissionCPU(t)
	start := time.Now()
	forEach(n, 32, func(i int) { tally.create(f, ns, fmt.Sprintf("%s-%05d", prefix, i)) })
	secs := time.Since(start).Seconds()
	api1, hooks1 := f.admissionCPU(t)
	// The pods' deletion stays out of the profile.
	profiled()
	f.deletePods(t, ns, "app=admit")
	r := tally.result(n, secs)
	r.cpuPerPod(api1-api0, hooks1-hooks0)
	return r
}

// cpuPerPod sets the CPU per pod from what kube-apiserver and the webhook
// replicas spent over the phase.
func (r *burstResult) cpuPerPod(apiserver, webhooks time.Duration) {
	r.APIServerCPUPerPodMs = float64(apiserver) / float64(time.Millisecond) / float64(r.Pods)
	r.WebhookCPUPerPodMs = float64(webhooks) / float64(time.Millisecond) / float64(r.Pods)
}

// admissionCPU is the CPU time so far of kube-apiserver and of the
// webhook replicas running now (none outside the webhook phases).
func (f *fleet) admissionCPU(t *testing.T) (apiserver, webhooks time.Duration) {
	apiserver, err := processCPU(f.s.dir, "kube-apiserver")
	if err != nil {
		t.Errorf("kube-apiserver CPU time: %v", err)
	}
	for i := range webhookIPs {
		if d, err := processCPU(f.s.dir, fmt.Sprintf("webhook-%d", i)); err == nil {
			webhooks += d
		}
	}
	return apiserver, webhooks
}

// profileWindow is how long a burst's API server profile runs, from the
// burst's start: a burst of 2,000 pods through admission lasts longer on
// the machines the fleet has run on (docs/fleet.md), so the window holds
// admission and nothing else.
const profileWindow = 10 * time.Second

// profileAPIServer, with FLEET_PROFILE=1, records a CPU profile of the API
// server over profileWindow into profiles/api-NAME.pprof beside the
// run's logs (go tool pprof _output/bin/k8s/kube-apiserver FILE); the
// function it returns waits until it is written.
func (f *fleet) profileAPIServer(t *testing.T, name string) (wait func()) {
	if !f.s.profile {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b, err := f.admin.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(int(profileWindow.Seconds()))).Timeout(profileWindow + time.Minute).DoRaw(f.ctx)
		if err != nil {
			t.Errorf("profile the API server during %s: %v (FLEET_PROFILE needs the API server's profiling on: fleet.sh up with FLEET_PROFILE set)", name, err)
			return
		}
		path := filepath.Join(f.s.dir, "profiles", "api-"+name+".pprof")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Error(err)
			return
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Error(err)
			return
		}
		t.Logf("API server CPU profile over the first %v of burst %s: %s", profileWindow, name, path)
	}()
	return func() { <-done }
}

// webhookUp: serving certificates, the webhook's config, its Service and
// Endpoints (the two replicas' addresses, as the endpoints controller would
// list them), the chart's MutatingWebhookConfiguration, both replicas.
func (f *fleet) webhookUp(t *testing.T) {
	dir := filepath.Join(f.s.dir, "webhook")
	ca := writeCerts(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte("apiVersion: ibkube.io/v1alpha1\nkind: WebhookConfig\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: webhookSvc, Namespace: webhookNS},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(9443)}}},
	}
	if _, err := f.admin.CoreV1().Services(webhookNS).Create(f.ctx, svc, metav1.CreateOptions{}); err != nil && !isExists(err) {
		t.Fatal(err)
	}
	for i := range webhookIPs {
		f.script(t, "webhook-start", fmt.Sprint(i))
	}
	for i := range webhookIPs {
		f.waitReplica(t, i)
	}
	f.setEndpoints(t, webhookIPs)
	mwc := f.renderWebhookConfig(t, ca)
	if _, err := f.admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(f.ctx, mwc, metav1.CreateOptions{}); err != nil && !isExists(err) {
		t.Fatal(err)
	}
	f.waitMutated(t, admitNS, contract.AnnotationInjected)
}

func (f *fleet) webhookDown(t *testing.T) {
	_ = f.admin.AdmissionregistrationV1().MutatingWebhookConfigurations().DeleteCollection(f.ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	for i := range webhookIPs {
		f.script(t, "webhook-stop", fmt.Sprint(i))
	}
}

// policyUp applies `ibkube policy` (the MutatingAdmissionPolicy, the
// ValidatingAdmissionPolicy, their bindings and parameters) and waits
// until a pod comes out mutated.
func (f *fleet) policyUp(t *testing.T) {
	out, err := exec.Command(f.s.ibkube, "policy").Output()
	if err != nil {
		t.Fatalf("ibkube policy: %v", err)
	}
	kubectl := os.Getenv("KUBECTL")
	cmd := exec.Command(kubectl, "--kubeconfig", f.s.kubeconfig, "apply", "--server-side", "-f", "-")
	cmd.Stdin = bytes.NewReader(out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply the policies: %v\n%s", err, b)
	}
	f.waitMutated(t, admitNS, contract.AnnotationInjected)
}

// floorNS holds the pods of the policy floor: a namespace that is not
// opted in, where a one-operation MutatingAdmissionPolicy applies.
const floorNS = "fleet-policy-floor"

// floorAnnotation is what the floor policy adds.
const floorAnnotation = "ibkube.io/fleet-policy-floor"

// policyFloorUp applies the least a mutating policy can be: one JSON
// patch operation adding one annotation, bound to floorNS. What it adds
// to a create is the API server's own cost of running a
// MutatingAdmissionPolicy (matching, the CEL activation, the JSON patch,
// decoding the result), which ibkube's policy pays too; the rest of policy
// mode's figure is ibkube's CEL.
func (f *fleet) policyFloorUp(t *testing.T) {
	mp := &admissionv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: floorNS},
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}},
			Mutations: []admissionv1.Mutation{{PatchType: admissionv1.PatchTypeJSONPatch, JSONPatch: &admissionv1.JSONPatch{
				Expression: "[JSONPatch{op: 'add', path: '/metadata/annotations/' + '" + strings.ReplaceAll(floorAnnotation, "/", "~1") + "', value: 'yes'}]",
			}}},
			FailurePolicy:      ptr.To(admissionv1.Fail),
			ReinvocationPolicy: admissionv1.IfNeededReinvocationPolicy,
		},
	}
	if _, err := f.admin.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(f.ctx, mp, metav1.CreateOptions{}); err != nil && !isExists(err) {
		t.Fatal(err)
	}
	b := &admissionv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: floorNS},
		Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName: floorNS,
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": floorNS},
			}},
		},
	}
	if _, err := f.admin.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(f.ctx, b, metav1.CreateOptions{}); err != nil && !isExists(err) {
		t.Fatal(err)
	}
	f.waitMutated(t, floorNS, floorAnnotation)
}

// policyFloorDown deletes the floor policy and its binding.
func (f *fleet) policyFloorDown(t *testing.T) {
	if err := f.admin.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Delete(f.ctx, floorNS, metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
	if err := f.admin.AdmissionregistrationV1().MutatingAdmissionPolicies().Delete(f.ctx, floorNS, metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}

// waitMutated creates probe pods in ns until one comes out with
// annotation key: the API server has taken the new admission
// configuration.
func (f *fleet) waitMutated(t *testing.T, ns, key string) {
	i := 0
	f.waitFor(t, "a probe pod mutated in "+ns, 2*time.Minute, func() (bool, string) {
		i++
		p := admitPod(fmt.Sprintf("probe-%d-%d", time.Now().Unix(), i))
		got, err := f.admin.CoreV1().Pods(ns).Create(f.ctx, p, metav1.CreateOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Annotations[key] != "", "probe pod not mutated"
	})
	f.deletePods(t, ns, "app=admit")
}

// replicaFault is how killReplicas takes a webhook replica down.
type replicaFault int

const (
	// replicaDeleted: the replica's pod is deleted (a rollout, a drain,
	// an eviction): its address leaves the Endpoints and the process gets
	// SIGTERM at the same moment; the webhook drains for 5 s (the chart's
	// preStop sleep and its own shutdown grace).
	replicaDeleted replicaFault = iota
	// replicaCrashed: the process dies at once (SIGKILL: an OOM kill, a
	// node's kernel, a crash). Its address stays in the Endpoints until
	// the kubelet notices the container is gone (crashNotice) and the
	// pod turns NotReady; the kubelet then restarts the container.
	replicaCrashed
)

func (k replicaFault) String() string {
	if k == replicaCrashed {
		return "SIGKILL"
	}
	return "pod deleted"
}

// crashNotice stands for the time from a container's death to its pod's
// address leaving the Service's endpoints: the kubelet's PLEG relists
// containers every second (pkg/kubelet/pleg/generic.go, relist period 1 s),
// its status manager then writes the pod NotReady and the endpoints
// controller drops the address; the harness's own Endpoints update adds
// that write's latency on top.
const crashNotice = time.Second

// killReplicas: a steady stream of annotated pods (10 per second) while one
// replica at a time is taken down every 30 s as fault says; the new
// replica joins the Endpoints once its /readyz answers.
func (f *fleet) killReplicas(t *testing.T, fault replicaFault) killResult {
	ctx, cancel := context.WithTimeout(f.ctx, f.s.webhookStream)
	defer cancel()
	res := killResult{Fault: fault.String()}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		for k := 0; ; k++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(30 * time.Second):
			}
			i := k % len(webhookIPs)
			var rest []string
			for j, ip := range webhookIPs {
				if j != i {
					rest = append(rest, ip)
				}
			}
			if fault == replicaCrashed {
				f.script(t, "webhook-stop", fmt.Sprint(i), "KILL")
				time.Sleep(crashNotice)
				f.setEndpoints(t, rest)
			} else {
				go f.setEndpoints(t, rest)
				f.script(t, "webhook-stop", fmt.Sprint(i))
			}
			f.script(t, "webhook-start", fmt.Sprint(i))
			if err := f.replicaReady(i, time.Minute); err != nil {
				t.Errorf("webhook replica %d after its restart: %v", i, err)
				return
			}
			f.setEndpoints(t, webhookIPs)
			mu.Lock()
			res.Kills++
			mu.Unlock()
		}
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			<-killerDone
			res.Seconds = time.Since(start).Seconds()
			f.deletePods(t, admitNS, "app=admit")
			return res
		case <-tick.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := f.admin.CoreV1().Pods(admitNS).Create(f.ctx, admitPod(fmt.Sprintf("kill-%d-%05d", fault, i)), metav1.CreateOptions{})
			mu.Lock()
			defer mu.Unlock()
			res.Pods++
			switch {
			case err != nil:
				res.Refused++
				if len(res.Errors) < 5 {
					res.Errors = append(res.Errors, err.Error())
				}
			case got.Annotations[contract.AnnotationInjected] == "":
				res.Unmutated++
			}
		}()
	}
}

func (f *fleet) setEndpoints(t *testing.T, ips []string) {
	var addrs []corev1.EndpointAddress
	for _, ip := range ips {
		addrs = append(addrs, corev1.EndpointAddress{IP: ip})
	}
	// The selector-less Service's Endpoints, as the endpoints controller
	// writes them for a webhook's pods; the API server resolves the webhook
	// Service through them (--enable-aggregator-routing).
	//lint:ignore SA1019 the Endpoints API is what the harness stands in for
	ep := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: webhookSvc, Namespace: webhookNS},
		//lint:ignore SA1019 see above
		Subsets: []corev1.EndpointSubset{{Addresses: addrs, Ports: []corev1.EndpointPort{{Name: "https", Port: 9443}}}},
	}
	cur, err := f.admin.CoreV1().Endpoints(webhookNS).Get(f.ctx, webhookSvc, metav1.GetOptions{})
	if err == nil {
		ep.ResourceVersion = cur.ResourceVersion
		_, err = f.admin.CoreV1().Endpoints(webhookNS).Update(f.ctx, ep, metav1.UpdateOptions{})
	} else {
		_, err = f.admin.CoreV1().Endpoints(webhookNS).Create(f.ctx, ep, metav1.CreateOptions{})
	}
	if err != nil {
		t.Errorf("webhook endpoints: %v", err)
	}
}

func (f *fleet) waitReplica(t *testing.T, i int) {
	if err := f.replicaReady(i, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// replicaReady polls replica i's /readyz until it answers 200; the
// deadline only bounds a failure.
func (f *fleet) replicaReady(i int, within time.Duration) error {
	url := fmt.Sprintf("http://%s:8081/readyz", webhookIPs[i])
	c := http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(within)
	for {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %d not ready after %s: %w", i, within, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (f *fleet) script(t *testing.T, args ...string) {
	cmd := exec.Command(f.s.script, args...)
	cmd.Env = os.Environ()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s %v: %v\n%s", f.s.script, args, err, b)
	}
}

// renderWebhookConfig renders the chart's MutatingWebhookConfiguration with
// helm, the CA bundle given.
func (f *fleet) renderWebhookConfig(t *testing.T, ca []byte) *admissionv1.MutatingWebhookConfiguration {
	chart := os.Getenv("FLEET_CHART")
	out, err := exec.Command(f.s.helm, "template", "ibkube", chart, "--namespace", webhookNS,
		"--show-only", "templates/webhook-mutatingwebhookconfiguration.yaml",
		"--set", "webhook.certs.mode=external", "--set", "webhook.certs.caBundle="+base64.StdEncoding.EncodeToString(ca)).Output()
	if err != nil {
		t.Fatalf("helm template the webhook configuration: %v", err)
	}
	var mwc admissionv1.MutatingWebhookConfiguration
	if err := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096).Decode(&mwc); err != nil {
		t.Fatalf("decode the chart's webhook configuration: %v", err)
	}
	for i := range mwc.Webhooks {
		if svc := mwc.Webhooks[i].ClientConfig.Service; svc != nil {
			svc.Name, svc.Namespace = webhookSvc, webhookNS
		}
		mwc.Webhooks[i].ClientConfig.CABundle = ca
		mwc.Webhooks[i].FailurePolicy = ptr.To(admissionv1.Fail)
	}
	return &mwc
}

// writeCerts writes a CA and the webhook's serving certificate (the
// Service's DNS names) into dir; it returns the CA in PEM.
func writeCerts(t *testing.T, dir string) []byte {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ca := suitetest.NewCA(t, "fleet-webhook-ca")
	var ips []net.IP
	for _, ip := range webhookIPs {
		ips = append(ips, net.ParseIP(ip))
	}
	svc := webhookSvc + "." + webhookNS + ".svc"
	crt, key := ca.Issue(t, 2, []string{svc, svc + ".cluster.local"}, ips)
	for name, b := range map[string][]byte{"tls.crt": crt, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ca.PEM
}
