package cordon

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// seenMsg is what kube-scheduler 1.37 wrote for a probe in the cluster e2e
// once its cache had ibkc-hb and ibkc-hb2 cordoned.
const seenMsg = "0/4 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 2 node(s) were unschedulable. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."

// outcome is what the fake scheduler does with one probe.
type outcome int

const (
	pending outcome = iota // never decided
	bind                   // bound to a cordoned node: its cache lagged
	refuse                 // unschedulable for the cordon
	other                  // unschedulable for another reason
)

// scheduler plays kube-scheduler against a fake clientset: the n-th probe
// created gets script[n] (the last entry for every later one), applied from
// the second look on, so each probe is Pending at first.
type scheduler struct {
	mu      sync.Mutex
	script  []outcome
	created []string
	looks   map[string]int
}

func (s *scheduler) install(cs *fake.Clientset) {
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.created = append(s.created, a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).Name)
		return false, nil, nil
	})
	cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ga := a.(k8stesting.GetAction)
		obj, err := cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), ga.GetNamespace(), ga.GetName())
		if err != nil {
			return true, nil, err
		}
		return true, s.decide(obj.(*corev1.Pod)), nil
	})
}

func (s *scheduler) decide(p *corev1.Pod) *corev1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.looks[p.Name]++
	idx := len(s.created) - 1
	if s.looks[p.Name] < 2 || idx < 0 {
		return p
	}
	p = p.DeepCopy()
	switch s.script[min(idx, len(s.script)-1)] {
	case bind:
		p.Spec.NodeName = "ibkc-hb2"
	case refuse:
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: seenMsg}}
	case other:
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/4 nodes are available: 4 Insufficient memory."}}
	}
	return p
}

func TestWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		script  []outcome
		want    Seen
		wantErr string // substring; "" for success
		probes  int
	}{
		{name: "seen at the first probe", script: []outcome{refuse}, want: Seen{Message: seenMsg}, probes: 1},
		{
			name:   "probes bound before the cache had the cordon are sent again",
			script: []outcome{bind, bind, refuse},
			want:   Seen{Message: seenMsg, PlacedEarly: 2, LastNode: "ibkc-hb2"},
			probes: 3,
		},
		{name: "every probe bound until the deadline", script: []outcome{bind}, wantErr: `bound before it did, the last on "ibkc-hb2"`},
		{name: "unschedulable for another reason is not the cordon", script: []outcome{other}, wantErr: "Insufficient memory", probes: 1},
		{name: "never decided", script: []outcome{pending}, wantErr: "0 probe(s) bound", probes: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cs := fake.NewClientset()
			s := &scheduler{script: tc.script, looks: map[string]int{}}
			s.install(cs)
			probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "cordon-probe", Namespace: "c13"}}
			got, err := Wait(context.Background(), cs.CoreV1().Pods("c13"), probe, 5*time.Millisecond, 500*time.Millisecond)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("Wait: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Wait error = %v, want one containing %q", err, tc.wantErr)
			}
			if tc.wantErr == "" {
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("Seen (-want +got):\n%s", diff)
				}
			}
			left, err := cs.CoreV1().Pods("c13").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(left.Items) != 0 {
				t.Errorf("%d probe(s) left behind, want every probe deleted", len(left.Items))
			}
			if tc.probes > 0 && len(s.created) != tc.probes {
				t.Errorf("%d probes created (%v), want %d", len(s.created), s.created, tc.probes)
			}
			for i, n := range s.created {
				if want := fmt.Sprintf("cordon-probe-%d", i+1); n != want {
					t.Errorf("probe %d named %s, want %s", i, n, want)
				}
			}
		})
	}
}
