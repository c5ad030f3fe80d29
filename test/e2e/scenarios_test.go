//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/internal/testing/testenv"
)

const (
	release      = "ibkube"
	releaseNS    = "ibkube-system"
	sharedRes    = corev1.ResourceName("rdma/shared_ib")
	exclusiveRes = corev1.ResourceName("rdma/ib")
	// The simulated host: an ND H100 v5 with 8 InfiniBand VFs (and one
	// Ethernet mlx5 for accelerated networking, which is not advertised).
	fixtureName    = fixture.NDv5
	fixtureIBHCAs  = 8
	runtimeMemlock = 65536 // containerd's soft RLIMIT_MEMLOCK (node.sh)
	// podStartTimeout bounds one pod's wait for Running. Sized for a 2-core
	// machine beside busy workers: 9j's first pod, created while the
	// sandboxes of 9h's scheduling-rate pods (two-free-NN) are still torn
	// down, took 44 s and 51 s there (kubelet podStartE2EDuration;
	// containerd's RunPodSandbox 33-37 s behind the CNI DELs) and 162 s
	// once, which a 2-minute wait failed.
	podStartTimeout = 5 * time.Minute
	// The single node's kubelet device-plugins directory (node.sh
	// KUBELET_ROOT), where the agent's plugin sockets are.
	kubeletPluginDir = "/var/lib/kubelet/device-plugins"
)

// fixtureDir holds the simulated host's sys/ and dev/ trees. It sits under
// the host's /dev because the chart mounts the host /dev into the agent pod
// (at /host/dev), so chart values (extraArgs in test/e2e/values-e2e.yaml)
// alone point the agent at it; node.sh down removes it.
const fixtureDir = "/dev/ibk-e2e-fixture"

// state carries what earlier scenarios established to later ones.
type state struct {
	installed  bool   // chart installed, webhook Ready
	agentReady bool   // node agent Ready and resources advertised
	why        string // why not, for SKIP lines
}

func TestE2E(t *testing.T) {
	var st state
	t.Run("0-node-plain-pod", func(t *testing.T) { testPlainPod(t) })
	t.Run("1-helm-install", func(t *testing.T) { testInstall(t, &st) })
	for _, sc := range []struct {
		name    string
		need    func(*testing.T, *Result) // what earlier scenarios must have set up
		timeout time.Duration
		run     func(context.Context, *testing.T, *Result)
	}{
		{"2-modes", st.needAgent, 6 * time.Minute, testModes},
		{"3-user-nccl-precedence", st.requireAgent, 4 * time.Minute, testPrecedence},
		{"4-untouched-and-refused", st.needInstall, 3 * time.Minute, testUntouchedAndRefused},
		{"4b-work-bound", st.needInstall, 3 * time.Minute, testWorkBound},
		{"5a-fault-kubelet-restart", st.needAgent, 5 * time.Minute, testKubeletRestart},
		{"5b-fault-port-down", st.needAgent, 4 * time.Minute, testPortDown},
		{"5c-fault-webhook-replica-deleted", st.needInstall, 5 * time.Minute, testWebhookReplicaDeleted},
		{"6-scale", st.needInstall, 15 * time.Minute, testScale},
		{"7a-nccl-one-owner", st.needAgent, 10 * time.Minute, testNCCLOneOwner},
		{"7b-nccl-mpi-ranks", st.needAgent, 6 * time.Minute, testNCCLMPIRanks},
		{"7c-nccl-mpi-ranks-nonroot", st.needAgent, 6 * time.Minute, testNCCLMPIRanksNonRoot},
		{"8-rdma-observability", st.needAgent, 8 * time.Minute, testObservability},
		{"9-dra", nil, 0, nil},
		{"10-policy-mode", st.needAgent, 10 * time.Minute, testPolicyMode},
	} {
		if sc.run == nil {
			// DRA mode is a group of subtests sharing what the node moved to.
			t.Run(sc.name, func(t *testing.T) { testDRA(t, &st) })
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			r := h.scenario(t, sc.name)
			sc.need(t, r)
			sc.run(ctxT(t, sc.timeout), t, r)
		})
	}
}

// 0: the node runs a plain pod with the test image, and the runtime's own
// memlock is the low one node.sh gave containerd (so a raise is visible).
func testPlainPod(t *testing.T) {
	r := h.scenario(t, "0-node-plain-pod")
	ctx := ctxT(t, 4*time.Minute)
	h.namespace(ctx, t, "e2e-plain", nil, nil)
	if _, err := h.cs.CoreV1().Pods("e2e-plain").Create(ctx, reportPod("plain", nil), metav1.CreateOptions{}); err != nil {
		fail(t, r, "create pod: %v", err)
	}
	start := time.Now()
	if _, err := h.waitRunning(ctx, "e2e-plain", "plain", podStartTimeout); err != nil {
		fail(t, r, "%v", err)
	}
	r.Figures["pod_start_seconds"] = time.Since(start).Seconds()
	rep, err := h.containerReport(ctx, "e2e-plain", "plain", "main")
	if err != nil {
		fail(t, r, "%v", err)
	}
	check(t, r, rep.UID == 1000, "uid %d, want 1000", rep.UID)
	check(t, r, rep.Memlock.Soft == runtimeMemlock, "memlock soft %d, want the runtime's %d", rep.Memlock.Soft, runtimeMemlock)
	check(t, r, len(rep.Devices) == 0, "plain pod sees devices %v", rep.devicePaths())
	check(t, r, rep.CapEff == "0000000000000000", "uid 1000 has CapEff %s", rep.CapEff)
}

func (st *state) needInstall(t *testing.T, r *Result) {
	t.Helper()
	if !st.installed {
		skip(t, r, "chart not installed: %s", st.why)
	}
}

func (st *state) needAgent(t *testing.T, r *Result) {
	t.Helper()
	st.needInstall(t, r)
	if !st.agentReady {
		skip(t, r, "node agent not running: %s", st.why)
	}
}

// requireAgent is needAgent for a scenario that only devices can exercise:
// another mode would test something else, so it fails rather than skips.
func (st *state) requireAgent(t *testing.T, r *Result) {
	t.Helper()
	st.needInstall(t, r)
	if !st.agentReady {
		fail(t, r, "node agent not ready, so no RDMA resource to request: %s", st.why)
	}
}

// 1: helm install of the chart with default values plus the fixture paths.
func testInstall(t *testing.T, st *state) {
	r := h.scenario(t, "1-helm-install")
	ctx := ctxT(t, 8*time.Minute)
	if !h.binaryExists("ibkube-webhook") {
		st.why = "cmd/ibkube-webhook is not built (make build)"
		skip(t, r, "%s", st.why)
	}
	if _, err := os.Stat(filepath.Join(h.root, "charts/ibkube/Chart.yaml")); err != nil {
		st.why = "charts/ibkube is missing"
		skip(t, r, "%s", st.why)
	}
	withAgent := h.binaryExists("ibkube-node-agent")
	if withAgent {
		if err := os.RemoveAll(fixtureDir); err != nil {
			fail(t, r, "clean fixture: %v", err)
		}
		if err := fixture.Build(fixtureDir, fixtureName, fixture.WithCharDevices()); err != nil {
			fail(t, r, "build fixture %s with char devices: %v", fixtureName, err)
		}
	} else {
		r.Notes = append(r.Notes, "cmd/ibkube-node-agent is not built: chart installed with agent.enabled=false")
	}
	// No Multus here, but its CRD (as the NAD client module ships it): the
	// chart then creates the IPoIB network and the webhook admits ipoib pods.
	if out, err := h.kubectlRun(ctx, "apply", "-f", testenv.NADCRD(t)); err != nil {
		fail(t, r, "NetworkAttachmentDefinition CRD: %v %s", err, out)
	}
	if out, err := h.kubectlRun(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd/network-attachment-definitions.k8s.cni.cncf.io"); err != nil {
		fail(t, r, "NetworkAttachmentDefinition CRD not established: %v %s", err, out)
	}
	// test/e2e/values-e2e.yaml points the agent at fixtureDir.
	vf := filepath.Join(h.root, "test/e2e/values-e2e.yaml")
	start := time.Now()
	out, err := run(ctx, h.helm, "upgrade", "--install", release, filepath.Join(h.root, "charts/ibkube"),
		"--namespace", releaseNS, "--create-namespace", "-f", vf, "--set", fmt.Sprintf("agent.enabled=%t", withAgent),
		// The node's containerd (test/e2e/node/node.sh), where the agent
		// reads images' /etc/passwd (scenario 7c).
		"--set", "agent.nri.containerd.socket=/run/ibk-e2e/containerd/containerd.sock",
		"--set", "agent.nri.containerd.root="+filepath.Join(h.e2eDir, "containerd", "root"),
		"--wait", "--timeout", "5m")
	if err != nil {
		st.why = "helm install failed"
		diag, _ := h.kubectlRun(ctx, "-n", releaseNS, "get", "pods,events", "-o", "wide")
		fail(t, r, "helm install: %v\n%s", err, diag)
	}
	t.Log(out)
	r.Figures["helm_install_seconds"] = time.Since(start).Seconds()
	// Webhook Ready with its certificates: the caBundle is patched in and a
	// labelled pod is mutated (checked again in detail by scenario 2).
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := h.kubectlRun(ctx, "get", "mutatingwebhookconfigurations", "-o", "jsonpath={.items[*].webhooks[*].clientConfig.caBundle}")
		return err == nil && len(strings.TrimSpace(out)) > 100, nil
	})
	if err != nil {
		st.why = "the webhook's caBundle was never set"
		fail(t, r, "%s", st.why)
	}
	st.installed = true
	if !withAgent {
		st.why = "cmd/ibkube-node-agent is not built"
		r.Detail = "webhook only: " + st.why
		return
	}
	n, err := h.waitAllocatable(ctx, exclusiveRes, 2*time.Minute, func(v int64) bool { return v == fixtureIBHCAs })
	r.Figures["allocatable_rdma_ib"] = float64(n)
	if err != nil {
		st.why = fmt.Sprintf("node allocatable %s is %d, want %d", exclusiveRes, n, fixtureIBHCAs)
		fail(t, r, "%s", st.why)
	}
	// The shared pool is a plugin of its own, registered on its own.
	s, _ := h.waitAllocatable(ctx, sharedRes, time.Minute, func(v int64) bool { return v > 0 })
	r.Figures["allocatable_rdma_shared_ib"] = float64(s)
	check(t, r, s > 0, "node allocatable %s is 0", sharedRes)
	st.agentReady = s > 0
}

// optedIn creates an opted-in namespace enforcing Pod Security baseline.
func optedIn(ctx context.Context, t *testing.T, name string, baseline bool) {
	labels := map[string]string{prefix + "inject": "enabled"}
	if baseline {
		labels["pod-security.kubernetes.io/enforce"] = "baseline"
	}
	h.namespace(ctx, t, name, labels, nil)
}

// 2: rdma-shared, rdma-exclusive (2 HCAs) and ipoib pods are admitted,
// scheduled and run with what the policy says.
func testModes(ctx context.Context, t *testing.T, r *Result) {
	const ns = "e2e-rdma"
	optedIn(ctx, t, ns, true)
	pods := map[string]map[string]string{
		"shared":    {prefix + "mode": "rdma-shared"},
		"exclusive": {prefix + "mode": "rdma-exclusive", prefix + "hcas": "2"},
		"ipoib":     {prefix + "mode": "ipoib"},
	}
	for name, annos := range pods {
		if _, err := h.cs.CoreV1().Pods(ns).Create(ctx, reportPod(name, annos), metav1.CreateOptions{}); err != nil {
			fail(t, r, "create %s pod: %v", name, err)
		}
	}
	reports := map[string]ContainerReport{}
	for name := range pods {
		pod, err := h.waitRunning(ctx, ns, name, podStartTimeout)
		if err != nil {
			check(t, r, false, "%v", err)
			continue
		}
		check(t, r, pod.Annotations[prefix+"injected"] != "", "%s pod has no %sinjected annotation", name, prefix)
		rep, err := h.containerReport(ctx, ns, name, "main")
		if err != nil {
			check(t, r, false, "%v", err)
			continue
		}
		reports[name] = rep
	}
	if rep, ok := reports["shared"]; ok {
		check(t, r, rep.Env["NCCL_CONF_FILE"] != "" || rep.Env["NCCL_IB_DISABLE"] == "0", "shared pod: no NCCL settings injected (env %v)", ncclEnv(rep))
		check(t, r, rep.Memlock.Soft > runtimeMemlock, "shared pod: memlock soft %d not raised above the runtime's %d", rep.Memlock.Soft, runtimeMemlock)
		r.Figures["shared_memlock_soft"] = float64(rep.Memlock.Soft)
		check(t, r, len(rep.Devices) > 0, "shared pod: no /dev/infiniband devices")
		check(t, r, !rep.hasCap("CAP_IPC_LOCK"), "shared pod under baseline got IPC_LOCK")
	}
	if rep, ok := reports["exclusive"]; ok {
		var uverbs []string
		for _, d := range rep.Devices {
			if strings.Contains(d.Path, "uverbs") {
				uverbs = append(uverbs, d.Path)
				check(t, r, d.Type == "char" && d.Major == 231, "exclusive pod: %s is %s %d:%d, want char 231:x", d.Path, d.Type, d.Major, d.Minor)
			}
		}
		check(t, r, len(uverbs) == 2, "exclusive pod: uverbs devices %v, want exactly 2", rep.devicePaths())
		// The HCAs behind the uverbs devices the container got, per the
		// fixture's sysfs (class/infiniband_verbs/uverbsN/ibdev).
		var allocated []string
		for _, u := range uverbs {
			ibdev, err := os.ReadFile(filepath.Join(fixture.SysfsRoot(fixtureDir), "class/infiniband_verbs", filepath.Base(u), "ibdev"))
			check(t, r, err == nil, "exclusive pod: %s has no ibdev in the fixture: %v", u, err)
			allocated = append(allocated, strings.TrimSpace(string(ibdev)))
		}
		got := hcaNames(rep.Env["NCCL_IB_HCA"])
		slices.Sort(allocated)
		check(t, r, len(allocated) == 2 && slices.Equal(got, allocated), "exclusive pod: NCCL_IB_HCA=%q names %v, the container got the devices of %v", rep.Env["NCCL_IB_HCA"], got, allocated)
		r.Notes = append(r.Notes, fmt.Sprintf("exclusive pod: NCCL_IB_HCA=%s, devices %v", rep.Env["NCCL_IB_HCA"], uverbs))
		check(t, r, rep.Memlock.Soft > runtimeMemlock, "exclusive pod: memlock soft %d not raised", rep.Memlock.Soft)
	}
	if rep, ok := reports["ipoib"]; ok {
		pod, _ := h.cs.CoreV1().Pods(ns).Get(ctx, "ipoib", metav1.GetOptions{})
		nets := ""
		if pod != nil {
			nets = pod.Annotations["k8s.v1.cni.cncf.io/networks"]
		}
		check(t, r, strings.Contains(nets, "ibkube-ipoib"), "ipoib pod: networks annotation %q lacks ibkube-ipoib", nets)
		check(t, r, rep.Env["NCCL_SOCKET_IFNAME"] != "" || (rep.NCCLConf != nil && strings.Contains(rep.NCCLConf.Content, "NCCL_SOCKET_IFNAME")),
			"ipoib pod: NCCL_SOCKET_IFNAME not set")
		r.Notes = append(r.Notes, "no Multus on the e2e node: the IPoIB interface itself is not attached")
	}
	// IPC_LOCK where policy adds it: a root container in a namespace without Pod Security.
	const privNS = "e2e-rdma-priv"
	optedIn(ctx, t, privNS, false)
	p := reportPod("root-shared", map[string]string{prefix + "mode": "rdma-shared"})
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: new(int64)} // root: the image's default user is 65532
	rep := h.startReport(ctx, t, r, privNS, p)
	check(t, r, rep.hasCap("CAP_IPC_LOCK"), "root rdma-shared pod without Pod Security lacks CAP_IPC_LOCK (caps %v)", rep.Capabilities)
}

// hcaNames returns the sorted HCA names of an NCCL_IB_HCA value such as
// "=mlx5_4:1,mlx5_5:1" (an exclusion list "^..." names none it allows).
func hcaNames(v string) []string {
	if v == "" || strings.HasPrefix(v, "^") {
		return nil
	}
	var out []string
	for _, e := range strings.Split(strings.TrimPrefix(v, "="), ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(e), ":")
		if name != "" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func ncclEnv(rep ContainerReport) map[string]string {
	out := map[string]string{}
	for k, v := range rep.Env {
		if strings.HasPrefix(k, "NCCL_") || strings.HasPrefix(k, "UCX_") {
			out[k] = v
		}
	}
	return out
}

// 3: a user's own NCCL_* value, through env and through envFrom, wins over
// every injected one in the running container.
func testPrecedence(ctx context.Context, t *testing.T, r *Result) {
	const ns = "e2e-precedence"
	optedIn(ctx, t, ns, true)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nccl-user"}, Data: map[string]string{
		"NCCL_IB_PCI_RELAXED_ORDERING": "0",
		"NCCL_IB_DISABLE":              "1",
	}}
	if _, err := h.cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		fail(t, r, "%v", err)
	}
	annos := map[string]string{prefix + "mode": "rdma-shared", prefix + "profile": "ndv5"}
	viaEnv := reportPod("via-env", annos)
	viaEnv.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NCCL_IB_PCI_RELAXED_ORDERING", Value: "0"}, {Name: "NCCL_IB_DISABLE", Value: "1"}, {Name: "NCCL_SOCKET_IFNAME", Value: "user0"}}
	viaEnvFrom := reportPod("via-envfrom", annos)
	viaEnvFrom.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "nccl-user"}}}}
	for _, p := range []*corev1.Pod{viaEnv, viaEnvFrom} {
		if _, err := h.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			fail(t, r, "create %s: %v", p.Name, err)
		}
	}
	for _, p := range []*corev1.Pod{viaEnv, viaEnvFrom} {
		pod, err := h.waitRunning(ctx, ns, p.Name, podStartTimeout)
		if err != nil {
			check(t, r, false, "%v", err)
			continue
		}
		check(t, r, pod.Annotations[prefix+"injected"] != "", "%s: not mutated", p.Name)
		rep, err := h.containerReport(ctx, ns, p.Name, "main")
		if err != nil {
			check(t, r, false, "%v", err)
			continue
		}
		check(t, r, rep.Env["NCCL_IB_PCI_RELAXED_ORDERING"] == "0", "%s: NCCL_IB_PCI_RELAXED_ORDERING=%q in the container, the user set 0", p.Name, rep.Env["NCCL_IB_PCI_RELAXED_ORDERING"])
		check(t, r, rep.Env["NCCL_IB_DISABLE"] == "1", "%s: NCCL_IB_DISABLE=%q in the container, the user set 1", p.Name, rep.Env["NCCL_IB_DISABLE"])
		if p.Name == "via-env" {
			check(t, r, rep.Env["NCCL_SOCKET_IFNAME"] == "user0", "%s: NCCL_SOCKET_IFNAME=%q, the user set user0", p.Name, rep.Env["NCCL_SOCKET_IFNAME"])
		}
		if rep.NCCLConf != nil {
			r.Notes = append(r.Notes, fmt.Sprintf("%s: profile values are in %s (NCCL reads the environment first)", p.Name, rep.NCCLConf.Path))
		}
	}
}

// 4: a pod in a namespace without the label is untouched; a pod with a bad
// annotation is refused with the documented message.
func testUntouchedAndRefused(ctx context.Context, t *testing.T, r *Result) {
	h.namespace(ctx, t, "e2e-not-opted-in", nil, nil)
	annos := map[string]string{prefix + "mode": "rdma-shared"}
	p, err := h.cs.CoreV1().Pods("e2e-not-opted-in").Create(ctx, reportPod("untouched", annos), metav1.CreateOptions{})
	if err != nil {
		fail(t, r, "create: %v", err)
	}
	check(t, r, len(p.Annotations) == 1, "pod in a namespace without the label got annotations %v", p.Annotations)
	c := p.Spec.Containers[0]
	check(t, r, len(c.Env) == 0 && len(c.Resources.Limits) == 0 && len(p.Spec.Volumes) <= 1, "pod in a namespace without the label was changed: env %v limits %v", c.Env, c.Resources.Limits)

	optedIn(ctx, t, "e2e-refused", false)
	bad := reportPod("bad", map[string]string{prefix + "mode": "rdma-bogus"})
	_, err = h.cs.CoreV1().Pods("e2e-refused").Create(ctx, bad, metav1.CreateOptions{})
	if err == nil {
		fail(t, r, "pod with mode=rdma-bogus was admitted")
	}
	msg := err.Error()
	r.Notes = append(r.Notes, "refusal: "+msg)
	check(t, r, strings.Contains(msg, prefix+"mode") && strings.Contains(msg, "rdma-bogus") && strings.Contains(msg, "rdma-shared"),
		"refusal does not name the annotation, the bad value and the accepted values: %s", msg)
	typo := reportPod("typo", map[string]string{prefix + "mdoe": "rdma-shared"})
	_, err = h.cs.CoreV1().Pods("e2e-refused").Create(ctx, typo, metav1.CreateOptions{})
	check(t, r, err != nil && strings.Contains(err.Error(), "mdoe"), "misspelt annotation %smdoe was not refused by name: %v", prefix, err)
}

// 5a: the kubelet restarts and the resource comes back.
func testKubeletRestart(ctx context.Context, t *testing.T, r *Result) {
	start := time.Now()
	if out, err := h.nodeSh(ctx, "restart-kubelet"); err != nil {
		fail(t, r, "restart kubelet: %v\n%s", err, out)
	}
	// The Node object may still show the old kubelet's allocatable, while
	// the new kubelet refuses pods until the plugin registers again.
	want := map[corev1.ResourceName]int64{exclusiveRes: fixtureIBHCAs}
	if err := h.waitKubeletBack(ctx, nodeName, kubeletPluginDir, exclusiveRes, start, want, 3*time.Minute); err != nil {
		fail(t, r, "after a kubelet restart: %v", err)
	}
	r.Figures["resource_back_seconds"] = time.Since(start).Seconds()
	// And a new exclusive pod gets its devices again.
	const ns = "e2e-kubelet-restart"
	optedIn(ctx, t, ns, true)
	rep := h.startReport(ctx, t, r, ns, reportPod("after", map[string]string{prefix + "mode": "rdma-exclusive", prefix + "hcas": "1"}))
	check(t, r, rep.uverbs() == 1, "pod after restart sees %v, want one uverbs device", rep.devicePaths())
}

// 5b: a fixture port goes down and allocatable drops, then recovers.
func testPortDown(ctx context.Context, t *testing.T, r *Result) {
	if err := fixture.SetPortState(fixtureDir, "mlx5_3", 1, "DOWN"); err != nil {
		fail(t, r, "port down: %v", err)
	}
	start := time.Now()
	n, err := h.waitAllocatable(ctx, exclusiveRes, 90*time.Second, func(v int64) bool { return v == fixtureIBHCAs-1 })
	if restore := fixture.SetPortState(fixtureDir, "mlx5_3", 1, "ACTIVE"); restore != nil {
		t.Errorf("port up: %v", restore)
	}
	if err != nil {
		fail(t, r, "port mlx5_3/1 down: allocatable %s stayed %d, want %d", exclusiveRes, n, fixtureIBHCAs-1)
	}
	r.Figures["drop_seconds"] = time.Since(start).Seconds()
	start = time.Now()
	n, err = h.waitAllocatable(ctx, exclusiveRes, 90*time.Second, func(v int64) bool { return v == fixtureIBHCAs })
	if err != nil {
		fail(t, r, "port mlx5_3/1 back up: allocatable %s is %d, want %d", exclusiveRes, n, fixtureIBHCAs)
	}
	r.Figures["recover_seconds"] = time.Since(start).Seconds()
}

// 5c: one webhook replica is deleted during a burst of pod creations and
// every pod is still admitted and mutated.
func testWebhookReplicaDeleted(ctx context.Context, t *testing.T, r *Result) {
	const ns = "e2e-burst"
	optedIn(ctx, t, ns, true)
	pods, err := h.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook"})
	if err != nil || len(pods.Items) < 2 {
		fail(t, r, "want 2 webhook replicas, have %d (%v)", len(pods.Items), err)
	}
	const total = 60
	errs := make(chan error, total)
	done := make(chan struct{})
	midBurst := make(chan struct{}) // closed once a sixth of the pods are created
	go func() {
		defer close(done)
		for i := 0; i < total; i++ {
			p := reportPod(fmt.Sprintf("burst-%02d", i), map[string]string{prefix + "mode": "rdma-shared"})
			p.Spec.NodeName = "no-such-node" // admitted and stored, never run
			_, err := h.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			errs <- err
			if i == total/6 {
				close(midBurst)
			}
			time.Sleep(50 * time.Millisecond) // the burst's pace
		}
	}()
	<-midBurst
	victim := pods.Items[0].Name
	if err := h.cs.CoreV1().Pods(releaseNS).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		fail(t, r, "delete webhook pod %s: %v", victim, err)
	}
	<-done
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
			check(t, r, false, "pod refused during the replica deletion: %v", err)
		}
	}
	list, err := h.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		fail(t, r, "%v", err)
	}
	mutated := 0
	for _, p := range list.Items {
		if p.Annotations[prefix+"injected"] != "" {
			mutated++
		}
	}
	r.Figures["pods_created"] = float64(total - failed)
	r.Figures["pods_mutated"] = float64(mutated)
	check(t, r, mutated == total, "%d of %d pods mutated while webhook pod %s was deleted", mutated, total, victim)
	_ = h.cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
}
