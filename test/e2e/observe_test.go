//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/ibkube/ibkube/hca/fixture"
)

const (
	observeNS = "e2e-observe"
	// The agent's counters period and idle window for this scenario: short
	// enough to see a reading and an idle verdict in seconds; the window
	// spans several readings, as the agent requires.
	observePeriod = time.Second
	observeWindow = 5 * time.Second
	// dataUnits is how far the harness advances port_xmit_data and
	// port_rcv_data, in sysfs units (octets divided by 4): 4 MiB, above the
	// idle rule's default 1 MiB.
	dataUnits = 1 << 20
	// agentMetricsPort is the chart's agent.metricsPort.
	agentMetricsPort = "8090"
	metricDataBytes  = "ibkube_rdma_port_data_bytes_total"
)

// setCounterValues sets the chart's agent.counters period and idle window
// with helm upgrade and waits for the agent DaemonSet's rollout. Helm's
// --wait alone has returned while the old agent was still stopping (its
// device plugins' ListAndWatch ended in the kubelet's log a moment before),
// and pods created next met the kubelet with no plugin serving ("no healthy
// devices present"). kubectl rollout status waits until the DaemonSet
// controller has seen the new spec and the new agent is available, which
// it is once the kubelet has its device lists.
func setCounterValues(ctx context.Context, period, window string) error {
	_, err := run(ctx, h.helm, "upgrade", release, filepath.Join(h.root, "charts/ibkube"), "--namespace", releaseNS,
		"--reuse-values", "--set", "agent.counters.period="+period, "--set", "agent.counters.idleWindow="+window,
		"--wait", "--timeout", "3m")
	if err != nil {
		return err
	}
	if out, err := h.kubectlRun(ctx, "-n", releaseNS, "rollout", "status", "daemonset", "-l", "app.kubernetes.io/component=node-agent", "--timeout=3m"); err != nil {
		return fmt.Errorf("agent rollout: %w: %s", err, out)
	}
	return nil
}

// counterValues reads the release's agent.counters period and idle window.
func counterValues(ctx context.Context) (period, window string, err error) {
	out, err := run(ctx, h.helm, "get", "values", release, "--namespace", releaseNS, "--all", "-o", "json")
	if err != nil {
		return "", "", err
	}
	var v struct {
		Agent struct {
			Counters struct {
				Period     string `json:"period"`
				IdleWindow string `json:"idleWindow"`
			} `json:"counters"`
		} `json:"agent"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return "", "", fmt.Errorf("helm get values: %w", err)
	}
	if v.Agent.Counters.Period == "" || v.Agent.Counters.IdleWindow == "" {
		return "", "", fmt.Errorf("helm get values: no agent.counters.period/idleWindow in %s", out)
	}
	return v.Agent.Counters.Period, v.Agent.Counters.IdleWindow, nil
}

// sample is one line of the Prometheus text format.
type sample struct {
	labels map[string]string
	value  float64
}

// samples returns the samples of metric in a text-format scrape. The
// agent's label values (HCA, pod and container names, directions) hold no
// quotes or commas, so a plain split reads them.
func samples(scrape, metric string) ([]sample, error) {
	var out []sample
	for _, line := range strings.Split(scrape, "\n") {
		rest, ok := strings.CutPrefix(line, metric+"{")
		if !ok {
			continue
		}
		lbls, val, ok := strings.Cut(rest, "} ")
		if !ok {
			return nil, fmt.Errorf("sample line %q: no value", line)
		}
		s := sample{labels: map[string]string{}}
		for _, kv := range strings.Split(lbls, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return nil, fmt.Errorf("sample line %q: label %q", line, kv)
			}
			s.labels[k] = strings.Trim(v, `"`)
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return nil, fmt.Errorf("sample line %q: %w", line, err)
		}
		s.value = f
		out = append(out, s)
	}
	return out, nil
}

// scrapeAgent reads the node agent's /metrics through the API server's pod
// proxy: the agent serves on the node's network (hostNetwork), which only
// the API server and the node itself reach.
func scrapeAgent(ctx context.Context) (string, error) {
	pods, err := h.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node-agent"})
	if err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		raw, err := h.cs.CoreV1().Pods(releaseNS).ProxyGet("http", p.Name, agentMetricsPort, "metrics", nil).DoRaw(ctx)
		if err != nil {
			return "", fmt.Errorf("scrape %s: %w", p.Name, err)
		}
		return string(raw), nil
	}
	return "", fmt.Errorf("no running node agent pod in %s", releaseNS)
}

// heldBytes returns the data bytes series of hca port 1 by direction, as
// far as they carry the pod's main container as holder.
func heldBytes(ctx context.Context, hca, pod string) (map[string]float64, error) {
	scrape, err := scrapeAgent(ctx)
	if err != nil {
		return nil, err
	}
	ss, err := samples(scrape, metricDataBytes)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, s := range ss {
		l := s.labels
		if l["hca"] == hca && l["port"] == "1" && l["holder_namespace"] == observeNS && l["holder_pod"] == pod && l["holder_container"] == "main" {
			out[l["direction"]] = s.value
		}
	}
	return out, nil
}

// heldHCA returns the HCA behind the one uverbs device the pod's main
// container got, per the fixture's sysfs.
func heldHCA(ctx context.Context, pod string) (string, error) {
	rep, err := h.containerReport(ctx, observeNS, pod, "main")
	if err != nil {
		return "", err
	}
	var hcas []string
	for _, d := range rep.Devices {
		if !strings.Contains(d.Path, "uverbs") {
			continue
		}
		b, err := readFixture(filepath.Join("class/infiniband_verbs", filepath.Base(d.Path), "ibdev"))
		if err != nil {
			return "", fmt.Errorf("%s: %s has no ibdev in the fixture: %w", pod, d.Path, err)
		}
		hcas = append(hcas, b)
	}
	if len(hcas) != 1 {
		return "", fmt.Errorf("%s holds HCAs %v (devices %v), want exactly one", pod, hcas, rep.devicePaths())
	}
	return hcas[0], nil
}

// podEvents returns the Events of reason on the named pod of observeNS.
func podEvents(ctx context.Context, pod, reason string) ([]corev1.Event, error) {
	l, err := h.cs.CoreV1().Events(observeNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// nodeEvents returns the node's Events of reason by name, with their counts.
func nodeEvents(ctx context.Context, reason string) (map[string]corev1.Event, error) {
	l, err := h.cs.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + nodeName + ",reason=" + reason})
	if err != nil {
		return nil, err
	}
	out := map[string]corev1.Event{}
	for _, e := range l.Items {
		out[e.Namespace+"/"+e.Name] = e
	}
	return out, nil
}

// 8: RDMA observability on the node. With the agent reading counters every
// second and a 5 s idle window: the bytes the fixture's HCA counts while an
// exclusive pod holds it show in the series carrying that pod as holder; a
// pod whose HCA stays still gets an RDMAIdle Event, one that opted out does
// not; an error counter that rises raises an RDMALinkErrors node Event.
func testObservability(ctx context.Context, t *testing.T, r *Result) {
	period, window, err := counterValues(ctx)
	if err != nil {
		fail(t, r, "read the release's counter values: %v", err)
	}
	start := time.Now()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		if err := setCounterValues(ctx, period, window); err != nil {
			t.Errorf("restore agent.counters period %s, idleWindow %s: %v", period, window, err)
			return
		}
		if n, err := h.waitAllocatable(ctx, exclusiveRes, 2*time.Minute, func(v int64) bool { return v == fixtureIBHCAs }); err != nil {
			t.Errorf("after restoring the counter values allocatable %s is %d, want %d", exclusiveRes, n, fixtureIBHCAs)
		}
	})
	if err := setCounterValues(ctx, observePeriod.String(), observeWindow.String()); err != nil {
		fail(t, r, "shorten the counters period and idle window: %v", err)
	}
	if n, err := h.waitAllocatable(ctx, exclusiveRes, 2*time.Minute, func(v int64) bool { return v == fixtureIBHCAs }); err != nil {
		fail(t, r, "after the agent's rollout allocatable %s is %d, want %d", exclusiveRes, n, fixtureIBHCAs)
	}
	r.Figures["rollout_seconds"] = time.Since(start).Seconds()

	optedIn(ctx, t, observeNS, true)
	excl := func(extra map[string]string) map[string]string {
		a := map[string]string{prefix + "mode": "rdma-exclusive", prefix + "hcas": "1"}
		for k, v := range extra {
			a[k] = v
		}
		return a
	}
	pods := map[string]map[string]string{
		"busy":   excl(nil),
		"idle":   excl(nil),
		"optout": excl(map[string]string{prefix + "rdma-idle-warning": "false"}),
	}
	for name, annos := range pods {
		if _, err := h.cs.CoreV1().Pods(observeNS).Create(ctx, reportPod(name, annos), metav1.CreateOptions{}); err != nil {
			fail(t, r, "create %s: %v", name, err)
		}
	}
	t.Cleanup(func() { deletePods(t, observeNS, "busy", "idle", "optout") })
	running := map[string]time.Time{}
	for _, name := range []string{"idle", "optout", "busy"} {
		if _, err := h.waitRunning(ctx, observeNS, name, podStartTimeout); err != nil {
			fail(t, r, "%v", err)
		}
		running[name] = time.Now()
	}

	// The busy pod's HCA moves bytes.
	hca, err := heldHCA(ctx, "busy")
	if err != nil {
		fail(t, r, "%v", err)
	}
	var before map[string]float64
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		before, err = heldBytes(ctx, hca, "busy")
		return err == nil && len(before) == 2, nil
	})
	if err != nil {
		fail(t, r, "no %s series of %s port 1 with holder %s/busy/main (last: %v, %v)", metricDataBytes, hca, observeNS, before, err)
	}
	moved := time.Now()
	for _, c := range []string{"counters/port_xmit_data", "counters/port_rcv_data"} {
		v, err := fixture.Counter(fixtureDir, hca, 1, c)
		if err == nil {
			err = fixture.SetCounter(fixtureDir, hca, 1, c, v+dataUnits)
		}
		if err != nil {
			fail(t, r, "advance %s of %s: %v", c, hca, err)
		}
	}
	want := map[string]float64{"xmit": before["xmit"] + 4*dataUnits, "rcv": before["rcv"] + 4*dataUnits}
	var got map[string]float64
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err = heldBytes(ctx, hca, "busy")
		return err == nil && got["xmit"] == want["xmit"] && got["rcv"] == want["rcv"], nil
	})
	if err != nil {
		fail(t, r, "%s of %s port 1 held by %s/busy: %v, want %v (4 x %d units more than %v; last error %v)", metricDataBytes, hca, observeNS, got, want, dataUnits, before, err)
	}
	r.Figures["series_bytes_seconds"] = time.Since(moved).Seconds()
	r.Notes = append(r.Notes, fmt.Sprintf("busy pod holds %s; its series rose by %d bytes each way", hca, 4*dataUnits))

	// The idle pod's HCA stays still: an RDMAIdle Event within the window
	// (plus readings and the Event's trip to the API server).
	var idleEvents []corev1.Event
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, observeWindow+time.Minute, true, func(ctx context.Context) (bool, error) {
		idleEvents, err = podEvents(ctx, "idle", "RDMAIdle")
		return err == nil && len(idleEvents) > 0, nil
	})
	if err != nil {
		fail(t, r, "no RDMAIdle Event on %s/idle (last error %v)", observeNS, err)
	}
	idleAt := time.Now()
	r.Figures["idle_event_seconds"] = idleAt.Sub(running["idle"]).Seconds()
	e := idleEvents[0]
	check(t, r, e.Type == corev1.EventTypeWarning, "RDMAIdle Event is %s, want Warning", e.Type)
	check(t, r, strings.Contains(e.Message, "NET/Socket") && strings.Contains(e.Message, prefix+"rdma-idle-warning"),
		"RDMAIdle Event does not say how to check for the TCP fallback and how to opt out: %s", e.Message)
	check(t, r, e.InvolvedObject.UID != "", "RDMAIdle Event carries no pod UID (kubectl describe pod will not show it)")

	// The opted-out pod, as still and started with it, gets none: watch for
	// a window (and three readings) past the later of the idle pod's Event
	// and the opted-out pod's start.
	until := idleAt
	if running["optout"].After(until) {
		until = running["optout"]
	}
	quiet := time.Until(until.Add(observeWindow + 3*observePeriod))
	var optEvents []corev1.Event
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, quiet, true, func(ctx context.Context) (bool, error) {
		optEvents, _ = podEvents(ctx, "optout", "RDMAIdle")
		return len(optEvents) > 0, nil
	})
	if err == nil {
		check(t, r, false, "pod with %srdma-idle-warning=false got an RDMAIdle Event: %s", prefix, optEvents[0].Message)
	} else if ctx.Err() != nil {
		fail(t, r, "watching the opted-out pod: %v", ctx.Err())
	}

	// A rising symbol_error raises an RDMALinkErrors node Event.
	const linkHCA, linkCounter = "mlx5_0", "counters/symbol_error"
	seen, err := nodeEvents(ctx, "RDMALinkErrors")
	if err != nil {
		fail(t, r, "%v", err)
	}
	old, err := fixture.Counter(fixtureDir, linkHCA, 1, linkCounter)
	if err != nil {
		fail(t, r, "%v", err)
	}
	raised := time.Now()
	if err := fixture.SetCounter(fixtureDir, linkHCA, 1, linkCounter, old+3); err != nil {
		fail(t, r, "raise %s of %s: %v", linkCounter, linkHCA, err)
	}
	defer func() {
		if err := fixture.SetCounter(fixtureDir, linkHCA, 1, linkCounter, old); err != nil {
			t.Errorf("restore %s of %s: %v", linkCounter, linkHCA, err)
		}
	}()
	var linkEvent corev1.Event
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		now, err := nodeEvents(ctx, "RDMALinkErrors")
		if err != nil {
			return false, nil
		}
		for k, e := range now {
			if prev, ok := seen[k]; (!ok || e.Count > prev.Count) && strings.HasPrefix(e.Message, linkHCA+" port 1:") {
				linkEvent = e
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		fail(t, r, "no new RDMALinkErrors Event on node %s after %s of %s port 1 rose by 3: %v", nodeName, linkCounter, linkHCA, err)
	}
	r.Figures["link_event_seconds"] = time.Since(raised).Seconds()
	check(t, r, linkEvent.Type == corev1.EventTypeWarning && strings.Contains(linkEvent.Message, "symbol_error +3"),
		"RDMALinkErrors Event is %s %q, want a Warning naming symbol_error +3", linkEvent.Type, linkEvent.Message)
}

// readFixture reads a file of the fixture's sysfs, trimmed.
func readFixture(rel string) (string, error) {
	b, err := os.ReadFile(filepath.Join(fixture.SysfsRoot(fixtureDir), rel))
	return strings.TrimSpace(string(b)), err
}
