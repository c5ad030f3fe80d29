package main

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/ibkube/ibkube/node/counters"
)

// api is the agent's one connection to the API server, built here so that
// the libraries it serves (node/agent, node/memlock, node/counters) only see
// the narrow interfaces they declare: the Node's labels for its profile,
// pods for the counters monitor, and one event recorder for the NRI plugin
// and the counters monitor alike.
type api struct {
	cs kubernetes.Interface
	// config is what cs was built from, for a client with a rate limit of
	// its own (the DRA driver's stale-spec reconcile).
	config   *rest.Config
	recorder record.EventRecorder
	stop     func()
}

// inClusterAPI connects through the pod's service account (the agent needs
// get on nodes and pods, create/patch on events). Outside a cluster it
// returns nil and says what is lost, so the agent still runs on a bare host.
func inClusterAPI(nodeName string, log logr.Logger) *api {
	kc, err := rest.InClusterConfig()
	if err != nil {
		log.V(1).Info("no in-cluster API client: the instance type comes from DMI, and memlock, idle and link findings are logged, not sent as Events",
			"reason", err.Error())
		return nil
	}
	cs, err := kubernetes.NewForConfig(kc)
	if err != nil {
		log.Error(err, "API client; the instance type comes from DMI, and findings are only logged")
		return nil
	}
	a := newAPI(cs, nodeName)
	a.config = kc
	return a
}

// newAPI wraps a clientset with the agent's event recorder: one broadcaster,
// so that client-go aggregates repeated Events across every source.
func newAPI(cs kubernetes.Interface, nodeName string) *api {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "ibkube-node-agent", Host: nodeName})
	return &api{cs: cs, recorder: rec, stop: b.Shutdown}
}

// NodeLabels implements agent.NodeLabels.
func (c *api) NodeLabels(ctx context.Context, name string) (map[string]string, error) {
	n, err := c.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", name, err)
	}
	return n.Labels, nil
}

// Pod implements counters.Pods.
func (c *api) Pod(ctx context.Context, namespace, name string) (counters.PodInfo, error) {
	got, err := c.cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return counters.PodInfo{}, fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
	}
	return counters.PodInfo{Namespace: namespace, Name: name, UID: string(got.UID), Annotations: got.Annotations}, nil
}
