//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/policytest"
	"github.com/ibkube/ibkube/internal/testing/suitetest"
	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/mutate"
	"github.com/ibkube/ibkube/webhook/policy"
)

const (
	scalePods    = 600 // per setup, over all rounds
	scaleRounds  = 4
	scaleClients = 8
)

// scaleSetup is one admission configuration the scale scenario measures.
type scaleSetup struct {
	name      string
	ns        string
	labels    map[string]string
	annotated bool
	// premutated: the pod is created already as ibkube's core would store it
	// (webhook/mutate), with no admission: the cost of the bigger object alone.
	premutated bool
}

// 6: 600 annotated pods created through the API by 8 concurrent clients, in
// rounds interleaving the setups, under no admission, a no-op webhook, ibkube
// as a webhook, ibkube as policies (admission.mode policy: webhook/policy
// rendered from the webhook's own configuration) and a hand-written
// MutatingAdmissionPolicy anchor; plus unannotated pods in an opted-in
// namespace (which must never reach the webhook), and, as a reference, pods
// created already mutated with no admission (what storing the bigger pod
// costs, which ibkube and the MAP both pay and the no-op does not). Pods are
// bound to a node that does not exist, so only admission and storage are
// measured.
func testScale(ctx context.Context, t *testing.T, r *Result) {
	setups := []scaleSetup{
		{name: "none", ns: "e2e-scale-none", annotated: true},
		{name: "noop-webhook", ns: "e2e-scale-noop", labels: map[string]string{"e2e-noop": "true"}, annotated: true},
		{name: "ibkube", ns: "e2e-scale-ibkube", labels: map[string]string{prefix + "inject": "enabled"}, annotated: true},
		{name: "map", ns: "e2e-scale-map", labels: map[string]string{"e2e-map": "true"}, annotated: true},
		{name: "ibkube-policy", ns: "e2e-scale-policy", labels: map[string]string{scalePolicyLabel: "true"}, annotated: true},
		{name: "ibkube-unannotated", ns: "e2e-scale-plain", labels: map[string]string{prefix + "inject": "enabled"}},
		{name: "none-premutated", ns: "e2e-scale-premut", annotated: true, premutated: true},
	}
	stopNoop, err := startNoopWebhook(ctx, t)
	if err != nil {
		fail(t, r, "no-op webhook: %v", err)
	}
	defer stopNoop()
	if out, err := h.kubectlRun(ctx, "apply", "-f", filepath.Join(h.root, "test/e2e/testdata/map.yaml")); err != nil {
		r.Notes = append(r.Notes, "MutatingAdmissionPolicy not installed: "+firstLine(out))
		setups = dropSetup(setups, "map")
	}
	defer h.kubectlRun(context.Background(), "delete", "--ignore-not-found", "-f", filepath.Join(h.root, "test/e2e/testdata/map.yaml"))
	policyFile, err := installScalePolicy(ctx)
	if err != nil {
		r.Notes = append(r.Notes, "ibkube policies not installed: "+firstLine(err.Error()))
		setups = dropSetup(setups, "ibkube-policy")
	} else {
		defer h.kubectlRun(context.Background(), "delete", "--ignore-not-found", "-f", policyFile)
	}
	costFigures(r)
	for _, s := range setups {
		h.namespace(ctx, t, s.ns, s.labels, nil)
	}
	// Every path must really do what it stands for before it is timed (a new
	// webhook configuration or policy takes a moment to reach the API server's
	// cache).
	for _, s := range setups {
		want := s.name == "ibkube" || s.name == "map" || s.name == "ibkube-policy" || s.premutated
		var mutated bool
		err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := h.cs.CoreV1().Pods(s.ns).Create(ctx, s.pod("probe"), metav1.CreateOptions{})
			if err != nil {
				return false, nil
			}
			_ = h.cs.CoreV1().Pods(s.ns).Delete(ctx, "probe", metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			mutated = got.Annotations[prefix+"injected"] != ""
			return mutated == want, nil
		})
		if err != nil {
			fail(t, r, "%s: probe pod mutated=%t, want %t", s.name, mutated, want)
		}
	}
	// One unmeasured warm-up round.
	createInterleaved(ctx, setups, 99, 40)
	for _, s := range setups {
		_ = h.cs.CoreV1().Pods(s.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
	}

	// Each round creates scalePods/scaleRounds pods per setup, the setups
	// interleaved request by request over the same 8 clients, so every setup
	// sees the same machine load (others may be compiling on these 2 cores).
	per := scalePods / scaleRounds
	lat := map[string][]time.Duration{}
	errs := map[string]int{}
	var wall time.Duration
	for round := 0; round < scaleRounds; round++ {
		d, l, e := createInterleaved(ctx, setups, round, per)
		wall += d
		for k, v := range l {
			lat[k] = append(lat[k], v...)
		}
		for k, v := range e {
			errs[k] += v
		}
		for _, s := range setups {
			if err := h.cs.CoreV1().Pods(s.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{}); err != nil {
				t.Logf("cleanup %s: %v", s.ns, err)
			}
		}
	}
	r.Figures["pods_created"] = float64(per * scaleRounds * len(setups))
	r.Figures["pods_per_s_all_setups"] = round3(float64(per*scaleRounds*len(setups)) / wall.Seconds())
	med := map[string]float64{}
	for _, s := range setups {
		m := median(lat[s.name])
		med[s.name] = m
		r.Figures[s.name+"_median_ms"] = round3(m)
		r.Figures[s.name+"_p90_ms"] = round3(percentile(lat[s.name], 0.9))
		check(t, r, errs[s.name] == 0, "%s: %d pod creations failed", s.name, errs[s.name])
	}
	ratio := func(a, b string) float64 {
		if med[a] == 0 || med[b] == 0 {
			return 0
		}
		return round3(med[a] / med[b])
	}
	r.Figures["ratio_noop_vs_none"] = ratio("noop-webhook", "none")
	r.Figures["ratio_ibkube_vs_none"] = ratio("ibkube", "none")
	r.Figures["ratio_ibkube_vs_noop"] = ratio("ibkube", "noop-webhook")
	r.Figures["ratio_unannotated_vs_none"] = ratio("ibkube-unannotated", "none")
	r.Figures["ratio_premutated_vs_none"] = ratio("none-premutated", "none")
	r.Figures["ratio_ibkube_vs_premutated"] = ratio("ibkube", "none-premutated")
	if _, ok := med["map"]; ok {
		r.Figures["ratio_map_vs_none"] = ratio("map", "none")
		r.Figures["ratio_ibkube_vs_map"] = ratio("ibkube", "map")
	}
	if _, ok := med["ibkube-policy"]; ok {
		r.Figures["ratio_policy_vs_none"] = ratio("ibkube-policy", "none")
		r.Figures["ratio_policy_vs_ibkube"] = ratio("ibkube-policy", "ibkube")
		if _, ok := med["map"]; ok {
			r.Figures["ratio_policy_vs_map"] = ratio("ibkube-policy", "map")
		}
	}
	// The admission-latency goals (docs/e2e.md, scenario 6): reported, and
	// noted when missed; timing on a shared 2-core machine is too noisy to
	// fail the suite on.
	goal := func(name string, v, max float64) {
		if v > max {
			r.Notes = append(r.Notes, fmt.Sprintf("goal missed: %s = %.3f (goal <= %.2f)", name, v, max))
		}
	}
	goal("ibkube/no-op webhook", r.Figures["ratio_ibkube_vs_noop"], 1.05)
	goal("unannotated/no admission", r.Figures["ratio_unannotated_vs_none"], 1.05)
	if v, ok := r.Figures["ratio_ibkube_vs_map"]; ok {
		goal("ibkube/MAP", v, 1.0)
	}
	// admission.mode policy: no slower than the hand-written anchor doing
	// less, and faster than the webhook.
	if v, ok := r.Figures["ratio_policy_vs_map"]; ok {
		goal("ibkube policy/MAP anchor", v, 1.0)
	}
	if v, ok := r.Figures["ratio_policy_vs_ibkube"]; ok {
		goal("ibkube policy/ibkube webhook", v, 0.999)
	}
}

// scalePolicyLabel selects the namespaces the scale scenario's ibkube
// policies apply to: not the opt-in label, which the webhook selects.
const scalePolicyLabel = "e2e-policy"

// installScalePolicy renders ibkube's policies (webhook/policy) from the
// WebhookConfig the installed chart gives the webhook, bound to namespaces
// labelled scalePolicyLabel, and applies them; it returns the file to
// delete them with.
func installScalePolicy(ctx context.Context) (string, error) {
	cm, err := h.cs.CoreV1().ConfigMaps(releaseNS).Get(ctx, release+"-webhook-config", metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("the webhook's configuration: %w", err)
	}
	cfg, err := config.Parse([]byte(cm.Data["webhook.yaml"]))
	if err != nil {
		return "", fmt.Errorf("the webhook's configuration: %w", err)
	}
	cfg.ReleaseNamespace = releaseNS
	objs, err := policy.Render(cfg, policy.Names{Prefix: "e2e-scale", Namespace: releaseNS,
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{scalePolicyLabel: "true"}}})
	if err != nil {
		return "", err
	}
	y, err := objs.YAML()
	if err != nil {
		return "", err
	}
	f := filepath.Join(h.e2eDir, "scale-policy.yaml")
	if err := os.WriteFile(f, y, 0o644); err != nil {
		return "", err
	}
	if out, err := h.kubectlRun(ctx, "apply", "--server-side", "-f", f); err != nil {
		return "", fmt.Errorf("apply: %v %s", err, out)
	}
	return f, nil
}

// costFigures reports the CEL cost the API server charges ibkube's
// policies for a 16-container pod (measured with its own evaluator, which
// the server's metrics do not expose), against its per-expression limit
// and per-policy budget.
func costFigures(r *Result) {
	objs, err := policy.Render(corpusConfig(), policy.Names{Prefix: "ibkube", Namespace: releaseNS})
	if err != nil {
		r.Notes = append(r.Notes, "CEL cost not measured: "+err.Error())
		return
	}
	s, err := policytest.New(objs)
	if err != nil {
		r.Notes = append(r.Notes, "CEL cost not measured: "+err.Error())
		return
	}
	got, err := s.Admit(context.Background(), policytest.WidePod(16), mutate.Namespace{Name: "training", Labels: map[string]string{contract.LabelInject: contract.InjectEnabled}})
	if err != nil || got.Refusal != "" {
		r.Notes = append(r.Notes, fmt.Sprintf("CEL cost not measured: %v %s", err, got.Refusal))
		return
	}
	r.Figures["policy_cel_cost_16_containers_mutation"] = float64(got.MutateCost)
	r.Figures["policy_cel_cost_16_containers_refusal_check"] = float64(got.RefuseCost)
	r.Figures["policy_cel_cost_16_containers_share_of_per_policy_budget"] = round3(float64(got.MutateCost) / float64(celconfig.RuntimeCELCostBudget))
	r.Figures["policy_cel_cost_16_containers_share_of_per_expression_limit"] = round3(float64(got.MutateCost) / float64(celconfig.PerCallLimit))
}

func corpusConfig() *config.Config {
	c := config.Default()
	c.ReleaseNamespace = releaseNS
	return c
}

// pod is the pod this setup creates: scalePod, mutated in advance by
// ibkube's core with the default configuration when s.premutated.
func (s scaleSetup) pod(name string) *corev1.Pod {
	p := scalePod(name, s.annotated)
	if s.premutated {
		p.Namespace = s.ns
		ns := mutate.Namespace{Name: s.ns, Labels: map[string]string{contract.LabelInject: contract.InjectEnabled}}
		if _, err := mutate.Mutate(p, ns, config.Default()); err != nil {
			panic(fmt.Sprintf("premutate scale pod: %v", err)) // the fixed scale pod always mutates
		}
	}
	return p
}

func scalePod(name string, annotated bool) *corev1.Pod {
	var annos map[string]string
	if annotated {
		annos = map[string]string{prefix + "mode": "rdma-shared"}
	}
	p := reportPod(name, annos)
	p.Spec.NodeName = "e2e-scale-nowhere" // stored, never scheduled nor run
	return p
}

// createInterleaved creates n pods for each setup with scaleClients
// concurrent clients, the setups alternating request by request, and returns
// the wall time and, per setup, each request's latency and the failures.
func createInterleaved(ctx context.Context, setups []scaleSetup, round, n int) (time.Duration, map[string][]time.Duration, map[string]int) {
	type job struct {
		s scaleSetup
		i int
	}
	next := make(chan job)
	var mu sync.Mutex
	lat := map[string][]time.Duration{}
	failed := map[string]int{}
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < scaleClients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				p := j.s.pod(fmt.Sprintf("r%d-%03d", round, j.i))
				t0 := time.Now()
				_, err := h.cs.CoreV1().Pods(j.s.ns).Create(ctx, p, metav1.CreateOptions{})
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					failed[j.s.name]++
				} else {
					lat[j.s.name] = append(lat[j.s.name], d)
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i++ {
		for k := range setups {
			// rotate the order so no setup always goes first
			next <- job{s: setups[(k+i)%len(setups)], i: i}
		}
	}
	close(next)
	wg.Wait()
	return time.Since(start), lat, failed
}

// startNoopWebhook deploys test/e2e/noopwebhook (in the test image) like the
// chart deploys ibkube's webhook: 2 replicas with the same resources and
// security context behind a Service, so the comparison is webhook against
// webhook, and registers it for namespaces labelled e2e-noop=true.
func startNoopWebhook(ctx context.Context, t *testing.T) (func(), error) {
	const ns, name = "e2e-noop-system", "e2e-noop"
	h.namespace(ctx, t, ns, nil, nil)
	certPEM, keyPEM, caPEM, err := serviceCert(t, name+"."+ns+".svc")
	if err != nil {
		return nil, err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-tls"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}}
	if _, err := h.cs.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	// Same resources and security as the chart's webhook.
	dep, err := h.cs.AppsV1().Deployments(releaseNS).Get(ctx, release+"-webhook", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("ibkube webhook deployment: %w", err)
	}
	ref := dep.Spec.Template.Spec.Containers[0]
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: dep.Spec.Replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SecurityContext: dep.Spec.Template.Spec.SecurityContext,
					Containers: []corev1.Container{{
						Name:            "noop",
						Image:           reportImage,
						ImagePullPolicy: corev1.PullNever,
						Command:         []string{"/usr/local/bin/noopwebhook", "-addr", ":9443", "-cert", "/certs/tls.crt", "-key", "/certs/tls.key"},
						Resources:       ref.Resources,
						SecurityContext: ref.SecurityContext,
						VolumeMounts:    []corev1.VolumeMount{{Name: "tls", MountPath: "/certs", ReadOnly: true}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9443)}},
							PeriodSeconds: 1},
					}},
					Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name + "-tls"}}}},
				},
			},
		},
	}
	if _, err := h.cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Selector: labels,
		Ports: []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(9443)}}}}
	if _, err := h.cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := h.cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && got.Status.ReadyReplicas == *d.Spec.Replicas, nil
	})
	if err != nil {
		return nil, fmt.Errorf("no-op webhook not ready: %w", err)
	}
	cfg := fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: e2e-noop
webhooks:
- name: noop.e2e.ibkube.io
  admissionReviewVersions: [v1]
  clientConfig:
    service: {name: %s, namespace: %s, path: /mutate, port: 443}
    caBundle: %s
  rules:
  - apiGroups: [""]
    apiVersions: [v1]
    operations: [CREATE]
    resources: [pods]
  namespaceSelector:
    matchLabels: {e2e-noop: "true"}
  sideEffects: None
  timeoutSeconds: 5
  failurePolicy: Fail
`, name, ns, base64.StdEncoding.EncodeToString(caPEM))
	f := filepath.Join(h.e2eDir, "noop-webhook.yaml")
	if err := os.WriteFile(f, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	stop := func() {
		_, _ = h.kubectlRun(context.Background(), "delete", "--ignore-not-found", "-f", f)
		_ = h.cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	}
	if out, err := h.kubectlRun(ctx, "apply", "-f", f); err != nil {
		stop()
		return nil, fmt.Errorf("register: %v %s", err, out)
	}
	return stop, nil
}

// serviceCert issues a serving certificate for dnsName from the node's CA
// (_output/e2e/pki) and returns it, its key and the CA, PEM-encoded.
func serviceCert(t *testing.T, dnsName string) (certPEM, keyPEM, caPEM []byte, err error) {
	pki := filepath.Join(h.e2eDir, "pki")
	caPEM, err = os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		return nil, nil, nil, err
	}
	caKeyPEM, err := os.ReadFile(filepath.Join(pki, "ca.key"))
	if err != nil {
		return nil, nil, nil, err
	}
	ca, err := suitetest.ParseCA(caPEM, caKeyPEM)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("CA in %s: %w", pki, err)
	}
	certPEM, keyPEM = ca.Issue(t, time.Now().UnixNano(), []string{dnsName}, nil)
	return certPEM, keyPEM, caPEM, nil
}

func dropSetup(s []scaleSetup, name string) []scaleSetup {
	var out []scaleSetup
	for _, x := range s {
		if x.name != name {
			out = append(out, x)
		}
	}
	return out
}

func median(d []time.Duration) float64 { return percentile(d, 0.5) }

// percentile returns the q-quantile of d in milliseconds.
func percentile(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[int(q*float64(len(s)-1))].Microseconds()) / 1000
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}
