//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
)

// claimNamespace makes the claim scenarios' namespace when an earlier
// scenario (9c) did not, keeping it (and its pods) when one did.
func claimNamespace(ctx context.Context, t *testing.T) {
	if _, err := h.cs.CoreV1().Namespaces().Get(ctx, draClaimNS, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		h.namespace(ctx, t, draClaimNS, map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}, nil)
	}
}

// 9j: one HCA goes to an exclusive claim or to sharers, never both, in
// either order (the HCA's shared counter in the slice): the second pod stays
// Pending with the scheduler's reason, is not bound while the first pod
// holds the HCA, and runs once the first is done.
//
// The first pod is deleted as a user deletes it, with its grace period: the
// kubelet stops its containers and unprepares its claims before it reports
// the pod terminal to the API server (kubelet SyncTerminatedPod: "resources
// must be unprepared AFTER all containers have stopped and BEFORE the pod
// status is changed on the API server"), and the resourceclaim controller
// deallocates a claim only once its pod is terminal or gone (isPodDone). So
// the first pod holds the HCA until it is terminal or gone, and the second
// must not be bound before. A forced delete (grace 0) removes the pod
// before the kubelet has unprepared it, so the scheduler may then bind a
// sharer at once; the third case shows that the agent's Prepare holds the
// HCA until the holder is unprepared.
func testDRAExclusiveIsExclusive(t *testing.T, st *state, d *draState) {
	r, ctx := d.scenario(t, "9j-dra-exclusive-is-exclusive", 8*time.Minute)
	claimNamespace(ctx, t)
	hca := needFreeHCAs(ctx, t, r)[0]
	if err := createTemplates(ctx, draClaimNS, oneHCATemplate("excl-one", classIB, hca), oneHCATemplate("share-one", classSharedIB, hca)); err != nil {
		fail(t, r, "%v", err)
	}
	for _, c := range []struct {
		first, second string
		force         bool
	}{
		{"excl-one", "share-one", false},
		{"share-one", "excl-one", false},
		{"excl-one", "share-one", true},
	} {
		first, second := c.first+"-first", c.second+"-second"
		key := strings.ReplaceAll(c.second, "-", "_")
		if c.force {
			first, second, key = c.first+"-forced", c.second+"-after-forced", key+"_after_forced_delete"
		}
		if _, err := startPods(ctx, draClaimNS, claimPod(first, c.first)); err != nil {
			fail(t, r, "%s: %v", first, err)
		}
		if _, err := h.cs.CoreV1().Pods(draClaimNS).Create(ctx, claimPod(second, c.second), metav1.CreateOptions{}); err != nil {
			fail(t, r, "%v", err)
		}
		msg, err := unschedulable(ctx, draClaimNS, second, time.Minute)
		check(t, r, err == nil, "%s then %s on %s: the second pod was not found Unschedulable (%v)", c.first, c.second, hca, err)
		if err == nil {
			check(t, r, strings.Contains(msg, "cannot allocate all claims"), "%s: the scheduler's reason %q does not name the claims", second, msg)
			r.Notes = append(r.Notes, fmt.Sprintf("%s then %s on %s: %s", c.first, c.second, hca, msg))
		}
		h0, err := handover(ctx, first, second, c.force)
		if err != nil {
			fail(t, r, "%s after %s: %v", second, first, err)
		}
		r.Figures[key+"_runs_after_release_seconds"] = round3(h0.running.Sub(h0.deleted).Seconds())
		if c.force {
			// Upstream's order, recorded: the claim is deallocated as soon
			// as the pod object is gone, whatever the kubelet still runs,
			// and the agent's Prepare is then what keeps the HCA apart.
			refusal := prepareRefusal(ctx, second)
			r.Figures[key+"_refused_by_prepare"] = boolFigure(refusal != "")
			if refusal != "" {
				r.Notes = append(r.Notes, fmt.Sprintf("%s after a forced delete of %s: %s", second, first, refusal))
			}
		} else {
			check(t, r, !h0.boundWhileHeld, "%s was bound to the node while %s still held %s (neither terminal nor gone): exclusive is not exclusive", second, first, hca)
		}
		r.Notes = append(r.Notes, fmt.Sprintf("%s (force %v): %s terminal or gone %s after the delete, %s bound %s after, running %s after",
			first, c.force, first, h0.done.Sub(h0.deleted).Round(time.Millisecond), second,
			h0.bound.Sub(h0.deleted).Round(time.Millisecond), h0.running.Sub(h0.deleted).Round(time.Millisecond)))
		// With its grace period, so the next case's pod finds the HCA
		// unprepared.
		if err := deleteGracefully(ctx, second); err != nil {
			fail(t, r, "%v", err)
		}
	}
}

// deleteGracefully deletes a pod with its grace period and waits until the
// API server has forgotten it, which the kubelet allows only after it has
// unprepared the pod's claims.
func deleteGracefully(ctx context.Context, name string) error {
	if err := h.cs.CoreV1().Pods(draClaimNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := h.cs.CoreV1().Pods(draClaimNS).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

func boolFigure(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// handed is what one API watch saw of a handover from holder to waiter.
type handed struct {
	// done: the holder was reported terminal or was gone from the API.
	deleted, done, bound, running time.Time
	// boundWhileHeld: the waiter had a node while the holder was neither
	// terminal nor gone.
	boundWhileHeld bool
}

// handover deletes the holder (with its grace period, or forced) and
// follows both pods through one watch of the namespace, whose events come
// in the API server's order: when the holder is terminal or gone, when the
// waiter is bound, and when it runs.
func handover(ctx context.Context, holder, waiter string, force bool) (handed, error) {
	var out handed
	pods := h.cs.CoreV1().Pods(draClaimNS)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return out, err
	}
	holderThere := false
	for _, p := range list.Items {
		switch p.Name {
		case holder:
			holderThere = true
		case waiter:
			if p.Spec.NodeName != "" {
				out.boundWhileHeld = true
				out.bound = time.Now()
			}
		}
	}
	if !holderThere {
		return out, fmt.Errorf("the holder %s is already gone", holder)
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return out, err
	}
	defer w.Stop()
	opts := metav1.DeleteOptions{}
	if force {
		opts.GracePeriodSeconds = ptr.To[int64](0)
	}
	out.deleted = time.Now()
	if err := pods.Delete(ctx, holder, opts); err != nil {
		return out, fmt.Errorf("delete %s: %w", holder, err)
	}
	for {
		select {
		case <-ctx.Done():
			return out, fmt.Errorf("%s did not run after %s was deleted: %w", waiter, holder, ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				return out, fmt.Errorf("the pod watch ended before %s ran", waiter)
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				continue
			}
			switch {
			case p.Name == holder && (ev.Type == watch.Deleted || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed):
				if out.done.IsZero() {
					out.done = time.Now()
				}
			case p.Name == waiter && p.Spec.NodeName != "":
				if out.bound.IsZero() {
					out.bound = time.Now()
					out.boundWhileHeld = out.done.IsZero()
				}
				if p.Status.Phase == corev1.PodRunning {
					out.running = time.Now()
					return out, nil
				}
			}
		}
	}
}

// prepareRefusal is the kubelet's FailedPrepareDynamicResources Event for
// the pod in which the agent refused an HCA another claim holds
// exclusively; "" when there is none.
func prepareRefusal(ctx context.Context, pod string) string {
	evs, err := h.cs.CoreV1().Events(draClaimNS).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + pod + ",reason=FailedPrepareDynamicResources",
	})
	if err != nil {
		return ""
	}
	for _, ev := range evs.Items {
		if strings.Contains(ev.Message, "holds it exclusively") {
			return ev.Message
		}
	}
	return ""
}

// sliceWrites counts the writes to the node's ResourceSlices of ibkube's
// driver that an API watch sees, and whether the HCA's exclusive device is
// tainted in the latest slices.
type sliceWrites struct {
	w      watch.Interface
	writes chan time.Time
	taint  chan bool
}

func watchSliceWrites(ctx context.Context, hca string) (*sliceWrites, error) {
	list, err := h.cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName + ",spec.driver=" + draDriver})
	if err != nil {
		return nil, err
	}
	w, err := h.cs.ResourceV1().ResourceSlices().Watch(ctx, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + nodeName + ",spec.driver=" + draDriver, ResourceVersion: list.ResourceVersion,
	})
	if err != nil {
		return nil, err
	}
	s := &sliceWrites{w: w, writes: make(chan time.Time, 1024), taint: make(chan bool, 1024)}
	go func() {
		for ev := range w.ResultChan() {
			sl, ok := ev.Object.(*resourceapi.ResourceSlice)
			if !ok {
				continue
			}
			s.writes <- time.Now()
			for _, dev := range sl.Spec.Devices {
				if devString(dev, contract.DRAAttrRDMADevice) == hca && devString(dev, contract.DRAAttrPool) == string(exclusiveRes) {
					s.taint <- len(dev.Taints) > 0
				}
			}
		}
	}()
	return s, nil
}

// 9k: a port flapped 10 times in 5 s, ending down, as the fixture's sysfs
// shows it to the agent's port poll: the API watch sees at most two slice
// writes, and the taint is there within 1 s of the final down.
func testDRAFlapBurst(t *testing.T, st *state, d *draState) {
	r, ctx := d.scenario(t, "9k-dra-flap-burst", 4*time.Minute)
	free := needFreeHCAs(ctx, t, r)
	hca := free[len(free)-1]
	ws, err := watchSliceWrites(ctx, hca)
	if err != nil {
		fail(t, r, "watch ResourceSlices: %v", err)
	}
	defer ws.w.Stop()
	defer func() {
		if err := fixture.SetPortState(fixtureDir, hca, 1, "ACTIVE"); err != nil {
			t.Errorf("port up: %v", err)
		}
	}()
	start := time.Now()
	for i := range 10 {
		state := "DOWN"
		if i%2 == 1 {
			state = "ACTIVE"
		}
		if err := fixture.SetPortState(fixtureDir, hca, 1, state); err != nil {
			fail(t, r, "%v", err)
		}
		time.Sleep(500 * time.Millisecond) // the flap's own pace, not a wait for the agent
	}
	if err := fixture.SetPortState(fixtureDir, hca, 1, "DOWN"); err != nil {
		fail(t, r, "%v", err)
	}
	finalDown := time.Now()
	// The taint as the API holds it, 1 s after the final down.
	tainted := false
	deadline := time.After(time.Until(finalDown.Add(time.Second)))
collect:
	for {
		select {
		case v := <-ws.taint:
			tainted = v
		case <-deadline:
			break collect
		}
	}
	for len(ws.taint) > 0 {
		tainted = <-ws.taint
	}
	check(t, r, tainted, "%s/1 down: the ResourceSlice had no taint on its device 1 s after the final down", hca)
	// The burst's writes: until the final down's 1 s, plus the agent's
	// publish interval for anything still held back.
	settle := time.After(time.Until(finalDown.Add(3 * time.Second)))
	<-settle
	n := len(ws.writes)
	r.Figures["slice_writes_per_flap_burst"] = float64(n)
	r.Notes = append(r.Notes, fmt.Sprintf("%s flapped 10 times from %s: %d slice writes seen by the API watch", hca, start.Format(time.RFC3339), n))
	check(t, r, n <= 2, "%d ResourceSlice writes for one flap burst, want at most 2", n)
}

// 9l: a CDI spec left behind for a claim that no longer exists, holding an
// HCA, is removed when the agent starts, and a pod wanting that HCA runs.
func testDRAStaleCDISpec(t *testing.T, st *state, d *draState) {
	r, ctx := d.scenario(t, "9l-dra-stale-cdi-spec", 5*time.Minute)
	claimNamespace(ctx, t)
	hca := needFreeHCAs(ctx, t, r)[0]
	ghost := string(uuid.NewUUID())
	spec := map[string]any{
		"cdiVersion": "0.6.0", "kind": contract.DRADriverName + "/hca",
		"annotations": map[string]string{
			contract.DRADriverName + "/claim":          draClaimNS + "/ghost-claim",
			contract.DRADriverName + "/exclusive-hcas": hca,
		},
		"devices": []map[string]any{{"name": ghost + "-hca", "containerEdits": map[string]any{"env": []string{"GHOST=1"}}}},
	}
	data, _ := json.Marshal(spec)
	path := filepath.Join(cdiDir, contract.DRADriverName+"-hca_"+ghost+".json")
	// The spec is planted (the running agent looks again only in 5 min),
	// the agent goes down and the DaemonSet brings it back.
	if err := os.WriteFile(path, data, 0o644); err != nil {
		fail(t, r, "plant %s: %v", path, err)
	}
	defer os.Remove(path)
	if err := restartDRAAgent(ctx); err != nil {
		fail(t, r, "%v", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := os.Stat(path)
		return os.IsNotExist(err), nil
	})
	check(t, r, err == nil, "the stale CDI spec %s is still there after the agent started", path)
	if err := createTemplates(ctx, draClaimNS, oneHCATemplate("after-stale", classIB, hca)); err != nil {
		fail(t, r, "%v", err)
	}
	_, err = startPods(ctx, draClaimNS, claimPod("after-stale", "after-stale"))
	check(t, r, err == nil, "a pod wanting %s, which the stale spec held, did not run: %v", hca, err)
	events, _ := h.kubectlRun(ctx, "get", "events", "-A", "--field-selector", "reason=StaleCDISpecRemoved", "-o", "name")
	check(t, r, strings.TrimSpace(events) != "", "no StaleCDISpecRemoved Event for the node")
	_ = deletePodsNow(ctx, draClaimNS, "after-stale")
}
