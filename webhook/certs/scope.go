package certs

import (
	"net/http"
	"strings"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// The webhook's Role grants its ServiceAccount the certificate Secret by name
// only (RBAC resourceNames), so it cannot read the other Secrets of its
// namespace. The API server authorizes a list or watch against resourceNames
// only when the request carries a metadata.name field selector ("Referring to
// resources", https://kubernetes.io/docs/reference/access-authn-authz/rbac/).
// cert-controller's rotator builds its own namespace-wide Secret informer from
// mgr.GetConfig() and takes no selector (open-policy-agent/cert-controller
// pkg/rotator/rotator.go, addNamespacedCache), so the rotator gets a manager
// whose config adds that selector to the Secret list and watch requests of
// the Secret's namespace.

// secretScopedManager is mgr with a rest config whose Secret collection reads
// in namespace are narrowed to the Secret name.
type secretScopedManager struct {
	manager.Manager
	cfg *rest.Config
}

func (m secretScopedManager) GetConfig() *rest.Config { return m.cfg }

func scopeToSecret(mgr manager.Manager, namespace, name string) manager.Manager {
	cfg := rest.CopyConfig(mgr.GetConfig())
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return &nameSelector{next: next, collection: "/api/v1/namespaces/" + namespace + "/secrets", selector: "metadata.name=" + name}
	})
	return secretScopedManager{Manager: mgr, cfg: cfg}
}

// nameSelector adds selector to the fieldSelector of GET requests (list and
// watch) on collection; reads of one named object pass unchanged.
type nameSelector struct {
	next       http.RoundTripper
	collection string
	selector   string
}

func (n *nameSelector) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || !strings.HasSuffix(strings.TrimSuffix(req.URL.Path, "/"), n.collection) {
		return n.next.RoundTrip(req)
	}
	q := req.URL.Query()
	switch fs := q.Get("fieldSelector"); {
	case fs == "":
		q.Set("fieldSelector", n.selector)
	case !strings.Contains(","+fs+",", ","+n.selector+","):
		q.Set("fieldSelector", fs+","+n.selector)
	}
	r := req.Clone(req.Context())
	r.URL.RawQuery = q.Encode()
	return n.next.RoundTrip(r)
}
