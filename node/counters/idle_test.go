package counters

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/ibkube/ibkube/contract"
)

func TestHolders(t *testing.T) {
	t.Parallel()
	pods := []*podresourcesv1.PodResources{
		{Namespace: "ml", Name: "train-0", Containers: []*podresourcesv1.ContainerResources{
			{Name: "trainer", Devices: []*podresourcesv1.ContainerDevices{
				{ResourceName: "rdma/ib", DeviceIds: []string{"mlx5_3", "mlx5_0"}},
				{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-1"}},
			}},
			{Name: "sidecar"},
		}},
		{Namespace: "dev", Name: "notebook", Containers: []*podresourcesv1.ContainerResources{
			{Name: "nb", Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "rdma/shared_ib", DeviceIds: []string{"slot-4"}}}},
		}},
		{Namespace: "gpu", Name: "infer", Containers: []*podresourcesv1.ContainerResources{
			{Name: "srv", Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-2"}}}},
		}},
	}
	pools := map[string]PoolView{
		"rdma/ib":        {Exclusive: true, HCAs: []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}},
		"rdma/shared_ib": {HCAs: []string{"mlx5_1", "mlx5_2"}},
	}
	got := Holders(FromPodResources(pods), Attribution{Pools: pools})
	want := []Holder{
		{Namespace: "dev", Pod: "notebook", Container: "nb", Shared: []string{"mlx5_1", "mlx5_2"}},
		{Namespace: "ml", Pod: "train-0", Container: "trainer", Exclusive: []string{"mlx5_0", "mlx5_3"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Holders (-want +got):\n%s", diff)
	}
	owners := ExclusiveOwners(got)
	if owners["mlx5_0"].Pod != "train-0" || owners["mlx5_3"].Container != "trainer" {
		t.Errorf("exclusive HCAs not attributed to their holder: %+v", owners)
	}
	if _, ok := owners["mlx5_1"]; ok {
		t.Errorf("a shared HCA was attributed to one container: %+v", owners["mlx5_1"])
	}
}

func TestIdleJudge(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	rule := IdleRule{Window: 10 * time.Minute, MinBytes: 1 << 20}
	train := Holder{Namespace: "ml", Pod: "train-0", Container: "trainer", Exclusive: []string{"mlx5_0", "mlx5_1"}}
	tcp := Holder{Namespace: "ml", Pod: "train-1", Container: "trainer", Exclusive: []string{"mlx5_2"}}
	young := Holder{Namespace: "ml", Pod: "train-2", Container: "trainer", Exclusive: []string{"mlx5_3"}}
	quiet := Holder{Namespace: "ml", Pod: "eval", Container: "eval", Exclusive: []string{"mlx5_4"}}
	shared := Holder{Namespace: "dev", Pod: "nb", Container: "nb", Shared: []string{"mlx5_5"}}
	late := Holder{Namespace: "ml", Pod: "new-hca", Container: "c", Exclusive: []string{"mlx5_6"}}

	h := History{}
	keep := 12 * time.Minute
	// Samples every minute for 11 minutes: mlx5_0/1 move 100 MiB a minute, the rest stay still.
	for i := 0; i <= 11; i++ {
		now := t0.Add(time.Duration(i) * time.Minute)
		b := map[string]uint64{
			"mlx5_0": uint64(i) * 100 << 20, "mlx5_1": uint64(i) * 100 << 20,
			"mlx5_2": 5000, "mlx5_3": 0, "mlx5_4": 0, "mlx5_5": 70,
		}
		if i >= 8 {
			b["mlx5_6"] = 0 // appeared three minutes ago
		}
		h.Add(now, b, keep)
	}
	now := t0.Add(11 * time.Minute)
	since := map[string]time.Time{
		train.ID(): t0, tcp.ID(): t0, young.ID(): now.Add(-5 * time.Minute), quiet.ID(): t0, shared.ID(): t0, late.ID(): t0,
	}
	got := rule.Judge(now, []Holder{train, tcp, young, quiet, shared, late}, since, h, map[string]bool{quiet.ID(): true})
	type verdict struct {
		ID    string
		Idle  bool
		Moved uint64
		Why   string
	}
	var g []verdict
	for _, v := range got {
		why := v.Why
		if v.Idle {
			why = "idle"
		}
		g = append(g, verdict{v.Holder.ID(), v.Idle, v.Moved, why})
	}
	want := []verdict{
		{train.ID(), false, 2 * 10 * 100 << 20, "active"},
		{tcp.ID(), true, 0, "idle"},
		{young.ID(), false, 0, "held for less than the window"},
		{quiet.ID(), false, 0, "opted out"},
		{shared.ID(), true, 0, "idle"},
		{late.ID(), false, 0, "no counters covering the window"},
	}
	if diff := cmp.Diff(want, g); diff != "" {
		t.Errorf("Judge (-want +got):\n%s", diff)
	}
	msg := got[1].Why
	for _, s := range []string{"container trainer", "mlx5_2", "NCCL_DEBUG=INFO", "NET/Socket", contract.AnnotationIdleWarning, "10m0s"} {
		if !strings.Contains(msg, s) {
			t.Errorf("idle message lacks %q: %s", s, msg)
		}
	}
	if !strings.Contains(got[4].Why, "shared HCAs") {
		t.Errorf("a shared holder's message must say the HCAs are shared: %s", got[4].Why)
	}
}

func TestHistoryKeepsOneSampleBeforeTheWindow(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := History{}
	for i := 0; i < 100; i++ {
		h.Add(t0.Add(time.Duration(i)*time.Second), map[string]uint64{"a": uint64(i)}, 10*time.Second)
	}
	s := h["a"]
	if got := []time.Time{s[0].At, s[len(s)-1].At}; !cmp.Equal(got, []time.Time{t0.Add(89 * time.Second), t0.Add(99 * time.Second)}) {
		t.Errorf("history spans %v, want 89s..99s", got)
	}
	h.Add(t0.Add(100*time.Second), map[string]uint64{}, 10*time.Second)
	if diff := cmp.Diff(History{}, h, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("an HCA gone from the reading must leave the history: %s", diff)
	}
}

func TestIdleRuleValidate(t *testing.T) {
	t.Parallel()
	if err := (IdleRule{}).Validate(); err == nil || !strings.Contains(err.Error(), "positive duration") {
		t.Errorf("zero window accepted or unclear: %v", err)
	}
}
