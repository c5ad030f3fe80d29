//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

const (
	scalePods    = 600 // per setup, over all rounds
	scaleRounds  = 4
	scaleClients = 8
	noopAddr     = "198.18.0.2:9444"
)

// scaleSetup is one admission configuration the scale scenario measures.
type scaleSetup struct {
	name      string
	ns        string
	labels    map[string]string
	annotated bool
}

// 6: 600 annotated pods created through the API by 8 concurrent clients, in
// rounds interleaving the setups, under no admission, a no-op webhook, ibkube
// and a MutatingAdmissionPolicy; plus unannotated pods in an opted-in
// namespace (which must never reach the webhook). Pods are bound to a node
// that does not exist, so only admission and storage are measured.
func testScale(t *testing.T, st *state) {
	r := h.scenario(t, "6-scale")
	st.needInstall(t, r)
	ctx := ctxT(t, 15*time.Minute)

	setups := []scaleSetup{
		{name: "none", ns: "e2e-scale-none", annotated: true},
		{name: "noop-webhook", ns: "e2e-scale-noop", labels: map[string]string{"e2e-noop": "true"}, annotated: true},
		{name: "ibkube", ns: "e2e-scale-ibkube", labels: map[string]string{prefix + "inject": "enabled"}, annotated: true},
		{name: "map", ns: "e2e-scale-map", labels: map[string]string{"e2e-map": "true"}, annotated: true},
		{name: "ibkube-unannotated", ns: "e2e-scale-plain", labels: map[string]string{prefix + "inject": "enabled"}},
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
	for _, s := range setups {
		h.namespace(ctx, t, s.ns, s.labels, nil)
	}
	// Every path must really do what it stands for before it is timed (a new
	// webhook configuration or policy takes a moment to reach the API server's
	// cache).
	for _, s := range setups {
		want := s.name == "ibkube" || s.name == "map"
		var mutated bool
		err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := h.cs.CoreV1().Pods(s.ns).Create(ctx, scalePod("probe", s.annotated), metav1.CreateOptions{})
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
	// One unmeasured warm-up burst per setup.
	for _, s := range setups {
		createBurst(ctx, s, 99, 40)
		_ = h.cs.CoreV1().Pods(s.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
	}

	per := scalePods / scaleRounds
	lat := map[string][]time.Duration{}
	wall := map[string]time.Duration{}
	errs := map[string]int{}
	for round := 0; round < scaleRounds; round++ {
		// Rotate the order each round so no setup always runs first.
		for i := range setups {
			s := setups[(i+round)%len(setups)]
			d, l, e := createBurst(ctx, s, round, per)
			wall[s.name] += d
			lat[s.name] = append(lat[s.name], l...)
			errs[s.name] += e
		}
		for _, s := range setups {
			if err := h.cs.CoreV1().Pods(s.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{}); err != nil {
				t.Logf("cleanup %s: %v", s.ns, err)
			}
		}
	}
	med := map[string]float64{}
	for _, s := range setups {
		m := median(lat[s.name])
		med[s.name] = m
		r.Figures[s.name+"_median_ms"] = round3(m)
		r.Figures[s.name+"_p90_ms"] = round3(percentile(lat[s.name], 0.9))
		r.Figures[s.name+"_pods_per_s"] = round3(float64(len(lat[s.name])) / wall[s.name].Seconds())
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
	if _, ok := med["map"]; ok {
		r.Figures["ratio_map_vs_none"] = ratio("map", "none")
		r.Figures["ratio_ibkube_vs_map"] = ratio("ibkube", "map")
	}
	// Goals (issue 7): reported, and noted when missed; timing on a shared
	// 2-core machine is too noisy to fail the suite on.
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

// createBurst creates n pods in s.ns with scaleClients concurrent clients and
// returns the wall time, each request's latency and the number of failures.
func createBurst(ctx context.Context, s scaleSetup, round, n int) (time.Duration, []time.Duration, int) {
	next := make(chan int)
	var mu sync.Mutex
	var lat []time.Duration
	failed := 0
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < scaleClients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				p := scalePod(fmt.Sprintf("r%d-%03d", round, i), s.annotated)
				t0 := time.Now()
				_, err := h.cs.CoreV1().Pods(s.ns).Create(ctx, p, metav1.CreateOptions{})
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					failed++
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return time.Since(start), lat, failed
}

// startNoopWebhook runs test/e2e/noopwebhook inside the node's network
// namespace (serving with the API server's certificate, whose SANs include the
// node IP) and registers it for namespaces labelled e2e-noop=true.
func startNoopWebhook(ctx context.Context, t *testing.T) (func(), error) {
	bin := filepath.Join(h.e2eDir, "noopwebhook")
	if out, err := run(ctx, "go", "build", "-o", bin, filepath.Join(h.root, "test/e2e/noopwebhook")); err != nil {
		return nil, fmt.Errorf("build: %v %s", err, out)
	}
	pki := filepath.Join(h.e2eDir, "pki")
	logf, err := os.Create(filepath.Join(h.e2eDir, "logs", "noopwebhook.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("nsenter", "--net=/run/netns/ibk-e2e", "--", bin, "-addr", noopAddr,
		"-cert", filepath.Join(pki, "apiserver.crt"), "-key", filepath.Join(pki, "apiserver.key"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: e2e-noop
webhooks:
- name: noop.e2e.ibkube.io
  admissionReviewVersions: [v1]
  clientConfig:
    url: https://%s/mutate
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
`, noopAddr, base64.StdEncoding.EncodeToString(ca))
	f := filepath.Join(h.e2eDir, "noop-webhook.yaml")
	if err := os.WriteFile(f, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	stop := func() {
		_, _ = h.kubectlRun(context.Background(), "delete", "--ignore-not-found", "-f", f)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	}
	if out, err := h.kubectlRun(ctx, "apply", "-f", f); err != nil {
		stop()
		return nil, fmt.Errorf("register: %v %s", err, out)
	}
	// The host reaches the node IP over the veth.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := net.DialTimeout("tcp", noopAddr, time.Second)
		if err != nil {
			return false, nil
		}
		c.Close()
		return true, nil
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("not serving: %w", err)
	}
	t.Logf("no-op webhook serving at https://%s/mutate", noopAddr)
	return stop, nil
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
