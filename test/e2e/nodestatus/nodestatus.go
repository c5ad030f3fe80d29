// Package nodestatus reads what a Node's status says after its kubelet was
// restarted. Until the new kubelet has written a status, the Node still
// shows what the previous one had (Ready, and every device plugin's
// resources), while the new kubelet reports a plugin's resource as 0 and
// admits no pod asking for it until that plugin registers again (kubelet
// devicemanager readCheckpoint: "the resource capacity will stay zero till
// the corresponding device plugin re-registers").
package nodestatus

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// MissingSince says what of "Ready with want, in a status the kubelet wrote
// at or after since" the Node does not show yet, or "" when it shows all of
// it. A status is the new kubelet's when its Ready heartbeat is no older
// than since's second (heartbeats carry whole seconds; a kubelet starting
// after since reports at once, its last report being long past).
func MissingSince(n *corev1.Node, since time.Time, want map[corev1.ResourceName]int64) string {
	ready, seen := false, false
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		seen = true
		if c.LastHeartbeatTime.Time.Before(since.Truncate(time.Second)) {
			return fmt.Sprintf("status last written at %s, before %s", c.LastHeartbeatTime.UTC().Format(time.RFC3339), since.UTC().Format(time.RFC3339))
		}
		ready = c.Status == corev1.ConditionTrue
	}
	switch {
	case !seen:
		return "no Ready condition"
	case !ready:
		return "not Ready"
	}
	for res, v := range want {
		if q := n.Status.Allocatable[res]; q.Value() != v {
			return fmt.Sprintf("allocatable %s %d, want %d", res, q.Value(), v)
		}
	}
	return ""
}
