//go:build fleet

package fleet

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/internal/testing/suitetest"
)

// surgeResult is what the real DaemonSet controller and scheduler did with a
// surging rollout of a DaemonSet shaped like the agent's: host network, a
// metrics and a health port.
type surgeResult struct {
	// Blocked: the new pod stayed Pending beside the old one.
	Blocked bool
	Message string
}

// surgeCheck answers whether the agent DaemonSet could roll with maxSurge:
// the agent runs in the host network (netlink), so the API server defaults
// its container ports to host ports, and a second agent pod on a node would
// need the same ones. A one-node DaemonSet of that shape with maxSurge 1 and
// maxUnavailable 0 is changed; the check waits until the scheduler says
// what it does with the surge pod.
func (f *fleet) surgeCheck(t *testing.T) {
	const name = "surge-check"
	labels := map[string]string{"app": name}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: &appsv1.RollingUpdateDaemonSet{
				MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork:                   true,
					NodeSelector:                  map[string]string{"kubernetes.io/hostname": f.nodes[0].name},
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					TerminationGracePeriodSeconds: ptr.To(int64(0)),
					Containers: []corev1.Container{{Name: "agent", Image: "fake", Ports: []corev1.ContainerPort{
						{Name: "metrics", ContainerPort: 8080}, {Name: "health", ContainerPort: 8081},
					}}},
				},
			},
		},
	}
	dss := f.admin.AppsV1().DaemonSets(workNS)
	if _, err := dss.Create(f.ctx, ds, metav1.CreateOptions{}); err != nil && !isExists(err) {
		t.Fatal(err)
	}
	defer func() {
		_ = dss.Delete(f.ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
		f.deletePods(t, workNS, "app="+name)
	}()
	f.waitFor(t, "the surge check's first pod available", 2*time.Minute, func() (bool, string) {
		got, err := dss.Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Status.NumberAvailable == 1, fmt.Sprintf("%d available", got.Status.NumberAvailable)
	})
	patch := `{"spec":{"template":{"metadata":{"annotations":{"fleet/revision":"2"}}}}}`
	if _, err := dss.Patch(f.ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var res surgeResult
	f.waitFor(t, "the scheduler's word on the surge pod", 2*time.Minute, func() (bool, string) {
		pods, err := f.admin.CoreV1().Pods(workNS).List(f.ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			if p.Annotations["fleet/revision"] != "2" {
				continue
			}
			if p.Spec.NodeName != "" {
				res = surgeResult{Message: "the surge pod was bound to " + p.Spec.NodeName}
				return true, ""
			}
			if c := suitetest.Unschedulable(&p); c != nil {
				res = surgeResult{Blocked: true, Message: c.Message}
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d pods", len(pods.Items))
	})
	f.report.Surge = res
	t.Logf("agent-shaped DaemonSet rolled with maxSurge 1: blocked %v: %s", res.Blocked, res.Message)
	if !res.Blocked || !strings.Contains(res.Message, "free ports") {
		t.Errorf("a host-network DaemonSet with fixed ports surged (%q): the chart's agent updateStrategy comment (values.yaml) and docs/fleet.md say it cannot", res.Message)
	}
}
