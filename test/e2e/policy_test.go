//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/ibkube/ibkube/webhook/mutate"
)

// policyCase is one pod admitted under both admission modes.
type policyCase struct {
	name string
	ns   string
	pod  *corev1.Pod
}

// admission is what one mode made of a pod: the stored pod, normalized, or
// the refusal message without the prefix naming the webhook or policy.
type admission struct {
	Pod     map[string]any
	Refusal string
}

// 10: `helm upgrade --set admission.mode=policy` replaces the webhook by the
// policies: the same pods as the webhook gave for the scenarios it supports
// (modes, refusals, user precedence, namespace defaults), compared dry-run
// request by request; an rdma-shared pod runs as uid 1000 under Pod
// Security baseline with its devices and memlock raised; then the release
// goes back to the webhook.
func testPolicyMode(ctx context.Context, t *testing.T, r *Result) {
	const baseNS, privNS, defNS = "e2e-pol-baseline", "e2e-pol-priv", "e2e-pol-nsdefault"
	optedIn(ctx, t, baseNS, true)
	optedIn(ctx, t, privNS, false)
	h.namespace(ctx, t, defNS, map[string]string{prefix + "inject": "enabled"},
		map[string]string{prefix + "mode": "rdma-exclusive", prefix + "profile": "ndv5"})

	mode := func(m string, kv ...string) map[string]string {
		a := map[string]string{prefix + "mode": m}
		for i := 0; i+1 < len(kv); i += 2 {
			a[kv[i]] = kv[i+1]
		}
		return a
	}
	userEnv := reportPod("user-env", mode("rdma-shared", prefix+"profile", "ndv5"))
	userEnv.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NCCL_IB_DISABLE", Value: "1"}, {Name: "NCCL_SOCKET_IFNAME", Value: "user0"}}
	gpu := reportPod("gpu", nil)
	gpu.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}
	cases := []policyCase{
		{"shared", baseNS, reportPod("shared", mode("rdma-shared"))},
		{"exclusive-2", baseNS, reportPod("exclusive-2", mode("rdma-exclusive", prefix+"hcas", "2"))},
		{"ipoib", baseNS, reportPod("ipoib", mode("ipoib"))},
		{"shared-ipoib-json", baseNS, reportPod("shared-ipoib-json", mode("rdma-shared,ipoib", "k8s.v1.cni.cncf.io/networks", `[{"name":"other"}]`))},
		{"root-shared", privNS, reportPod("root-shared", mode("rdma-shared"))},
		{"fail-closed", privNS, reportPod("fail-closed", mode("rdma-exclusive", prefix+"socket-fallback", "deny", prefix+"profile", "ndv5"))},
		{"user-env", baseNS, userEnv},
		{"namespace-default-gpu", defNS, gpu},
		{"refused-mode", baseNS, reportPod("refused-mode", mode("rdma-bogus"))},
		{"refused-typo", baseNS, reportPod("refused-typo", map[string]string{prefix + "mdoe": "rdma-shared"})},
		{"refused-hcas", baseNS, reportPod("refused-hcas", mode("rdma-exclusive", prefix+"hcas", "99"))},
		{"refused-profile", baseNS, reportPod("refused-profile", mode("rdma-shared", prefix+"profile", "nd-none"))},
		{"refused-memlock", baseNS, reportPod("refused-memlock", mode("rdma-shared", prefix+"memlock", "100m"))},
		{"memlock-1.5Gi", baseNS, reportPod("memlock-1.5Gi", mode("rdma-shared", prefix+"memlock", "1.5Gi"))},
		{"refused-too-many-containers", baseNS, widePod("too-many", mutate.MaxContainers+1)},
	}
	viaWebhook := admitAll(ctx, t, cases)

	if err := helmAdmissionMode(ctx, "policy"); err != nil {
		fail(t, r, "helm upgrade --set admission.mode=policy: %v", err)
	}
	defer func() {
		// Leave the node as the other scenarios expect it.
		if err := helmAdmissionMode(context.Background(), "webhook"); err != nil {
			t.Errorf("helm upgrade back to admission.mode=webhook: %v", err)
		}
	}()
	out, _ := h.kubectlRun(ctx, "get", "mutatingwebhookconfigurations,deployments", "-A", "-o", "name")
	check(t, r, !strings.Contains(out, release+"-webhook"), "policy mode still runs the webhook: %s", out)
	// The policies reach the API server's admission through informers, the
	// mutating and the validating policy each through its own: one being
	// in force says nothing of the other, so wait for both.
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := h.cs.CoreV1().Pods(baseNS).Create(ctx, reportPod("probe", mode("rdma-shared")), dryRun)
		if err != nil || p.Annotations[prefix+"injected"] == "" {
			return false, nil
		}
		_, err = h.cs.CoreV1().Pods(baseNS).Create(ctx, reportPod("probe-refused", mode("rdma-bogus")), dryRun)
		return err != nil && strings.Contains(err.Error(), "denied request: "), nil
	})
	if err != nil {
		fail(t, r, "policies installed but within 2m no pod is both mutated and, with a bad mode, refused")
	}
	viaPolicy := admitAll(ctx, t, cases)
	same := 0
	for _, c := range cases {
		if diff := cmp.Diff(viaWebhook[c.name], viaPolicy[c.name]); diff != "" {
			check(t, r, false, "%s: the policy's result differs from the webhook's (-webhook +policy):\n%s", c.name, diff)
			continue
		}
		same++
	}
	r.Figures["pods_same_as_webhook"] = float64(same)
	r.Figures["pods_compared"] = float64(len(cases))
	policyWorkBound(ctx, t, r, baseNS)

	// Runs as uid 1000 under baseline: devices, memlock from the annotation
	// the policy wrote, no IPC_LOCK.
	run := reportPod("run-shared", mode("rdma-shared"))
	if _, err := h.cs.CoreV1().Pods(baseNS).Create(ctx, run, metav1.CreateOptions{}); err != nil {
		fail(t, r, "create run-shared: %v", err)
	}
	if _, err := h.waitRunning(ctx, baseNS, run.Name, podStartTimeout); err != nil {
		fail(t, r, "%v", err)
	}
	rep, err := h.containerReport(ctx, baseNS, run.Name, "main")
	if err != nil {
		fail(t, r, "%v", err)
	}
	check(t, r, rep.UID == 1000, "run-shared: uid %d, want 1000", rep.UID)
	check(t, r, len(rep.Devices) > 0, "run-shared: no /dev/infiniband devices")
	check(t, r, rep.Memlock.Soft > runtimeMemlock, "run-shared: memlock soft %d not raised above the runtime's %d", rep.Memlock.Soft, runtimeMemlock)
	check(t, r, !rep.hasCap("CAP_IPC_LOCK"), "run-shared under baseline got IPC_LOCK")
	check(t, r, rep.NCCLConf != nil && strings.Contains(rep.NCCLConf.Content, "NCCL_IB_DISABLE=0"), "run-shared: no NCCL conf file with NCCL_IB_DISABLE=0")
	r.Figures["policy_shared_memlock_soft"] = float64(rep.Memlock.Soft)
}

var versionInAnnotation = regexp.MustCompile(`; version=[^;]*$`)

// admitAll dry-run creates every case and returns what was admitted.
func admitAll(ctx context.Context, t *testing.T, cases []policyCase) map[string]admission {
	t.Helper()
	out := map[string]admission{}
	for _, c := range cases {
		p := c.pod.DeepCopy()
		// No service account token volume: its name is random per request.
		p.Spec.AutomountServiceAccountToken = new(bool)
		got, err := h.cs.CoreV1().Pods(c.ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			msg := err.Error()
			// "admission webhook ... denied the request: " or
			// "ValidatingAdmissionPolicy ... denied request: "
			if _, after, ok := strings.Cut(msg, "denied the request: "); ok {
				msg = after
			} else if _, after, ok := strings.Cut(msg, "denied request: "); ok {
				msg = after
			}
			out[c.name] = admission{Refusal: msg}
			continue
		}
		got.UID, got.CreationTimestamp, got.ManagedFields, got.ResourceVersion = "", metav1.Time{}, nil, ""
		if v, ok := got.Annotations[prefix+"injected"]; ok {
			got.Annotations[prefix+"injected"] = versionInAnnotation.ReplaceAllString(v, "; version=V")
		}
		b, _ := json.Marshal(got)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		out[c.name] = admission{Pod: m}
	}
	return out
}

// helmAdmissionMode upgrades the release to admission mode m, keeping the
// values scenario 1 installed it with.
func helmAdmissionMode(ctx context.Context, m string) error {
	vf := filepath.Join(h.root, "test/e2e/values-e2e.yaml")
	out, err := run(ctx, h.helm, "upgrade", release, filepath.Join(h.root, "charts/ibkube"), "--namespace", releaseNS,
		"-f", vf, "--reuse-values", "--set", "admission.mode="+m, "--wait", "--timeout", "5m")
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	if m != "webhook" {
		return nil
	}
	// The webhook serves again once its caBundle is in place and it mutates.
	return wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := h.kubectlRun(ctx, "get", "mutatingwebhookconfigurations", "-o", "jsonpath={.items[*].webhooks[*].clientConfig.caBundle}")
		return err == nil && len(strings.TrimSpace(out)) > 100, nil
	})
}
