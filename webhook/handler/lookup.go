package handler

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// NamespaceLookup reads a namespace's labels and annotations.
type NamespaceLookup interface {
	Namespace(ctx context.Context, name string) (mutate.Namespace, error)
}

// NetworkLookup tells whether a NetworkAttachmentDefinition exists. It returns an
// error wrapping ErrNetworkAPIMissing when the API server does not serve the
// k8s.cni.cncf.io/v1 NetworkAttachmentDefinition API (Multus not installed).
type NetworkLookup interface {
	NetworkExists(ctx context.Context, namespace, name string) (bool, error)
}

// ErrNetworkAPIMissing says the cluster has no NetworkAttachmentDefinition CRD.
var ErrNetworkAPIMissing = errors.New("the k8s.cni.cncf.io/v1 NetworkAttachmentDefinition API is not served")

// ErrBadName refuses a namespace or object name that is not a Kubernetes
// name. The lookups refuse it before building an API path from it: "kube-system/secrets/x"
// as a namespace name would otherwise read another resource's path (an
// existence oracle), and "../" would climb out of the resource.
var ErrBadName = errors.New("not a Kubernetes name")

// checkNamespaceName accepts a namespace name: a DNS-1123 label.
func checkNamespaceName(name string) error {
	// The length first: the validation's regular expressions take seconds
	// of CPU on a forged name of megabytes.
	if len(name) > validation.DNS1123LabelMaxLength || len(validation.IsDNS1123Label(name)) > 0 {
		return fmt.Errorf("namespace %q: %w: want a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters)",
			clip(name), ErrBadName)
	}
	return nil
}

// checkObjectName accepts an object name: a DNS-1123 subdomain, which is what
// the API server accepts for NetworkAttachmentDefinitions.
func checkObjectName(kind, name string) error {
	if len(name) > validation.DNS1123SubdomainMaxLength || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return fmt.Errorf("%s name %q: %w: want a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)",
			kind, clip(name), ErrBadName)
	}
	return nil
}

// NamespaceGVK and NetworkAttachmentDefinitionGVK are the kinds the webhook reads,
// as metadata only: the server caches exactly these.
var (
	NamespaceGVK                   = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	NetworkAttachmentDefinitionGVK = schema.GroupVersionKind{Group: "k8s.cni.cncf.io", Version: "v1", Kind: "NetworkAttachmentDefinition"}
)

// ClientLookup reads namespaces and NetworkAttachmentDefinitions as metadata
// through a cached reader (controller-runtime's cache). When the cache has no
// answer it asks the API server (Live): a namespace labelled, or a NAD created, a
// moment before the pod must not be missed just because the watch lags. The live
// read happens only on a miss, which the webhook configuration's
// namespaceSelector makes rare.
type ClientLookup struct {
	Cached client.Reader
	Live   client.Reader // optional
}

var (
	_ NamespaceLookup = ClientLookup{}
	_ NetworkLookup   = ClientLookup{}
)

// Namespace implements NamespaceLookup.
func (l ClientLookup) Namespace(ctx context.Context, name string) (mutate.Namespace, error) {
	if err := checkNamespaceName(name); err != nil {
		return mutate.Namespace{}, err
	}
	obj, err := l.get(ctx, NamespaceGVK, client.ObjectKey{Name: name}, func(o *metav1.PartialObjectMetadata) bool {
		return o.Labels[contract.LabelInject] == contract.InjectEnabled
	})
	if err != nil {
		return mutate.Namespace{}, fmt.Errorf("read namespace %s: %w", name, err)
	}
	return mutate.Namespace{Name: name, Labels: obj.Labels, Annotations: obj.Annotations}, nil
}

// NetworkExists implements NetworkLookup.
func (l ClientLookup) NetworkExists(ctx context.Context, namespace, name string) (bool, error) {
	if err := checkNamespaceName(namespace); err != nil {
		return false, fmt.Errorf("NetworkAttachmentDefinition %w", err)
	}
	if err := checkObjectName("NetworkAttachmentDefinition", name); err != nil {
		return false, err
	}
	_, err := l.get(ctx, NetworkAttachmentDefinitionGVK, client.ObjectKey{Namespace: namespace, Name: name}, nil)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	case meta.IsNoMatchError(err):
		return false, fmt.Errorf("%w: %w", ErrNetworkAPIMissing, err)
	default:
		return false, fmt.Errorf("read NetworkAttachmentDefinition %s/%s: %w", namespace, name, err)
	}
}

// get reads from the cache and falls back to the live reader when the object is
// missing or, if good is given, when the cached copy is not good.
func (l ClientLookup) get(ctx context.Context, gvk schema.GroupVersionKind, key client.ObjectKey,
	good func(*metav1.PartialObjectMetadata) bool) (*metav1.PartialObjectMetadata, error) {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	err := l.Cached.Get(ctx, key, obj)
	if l.Live == nil || (err == nil && (good == nil || good(obj))) || (err != nil && !apierrors.IsNotFound(err)) {
		return obj, err
	}
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(gvk)
	if err := l.Live.Get(ctx, key, live); err != nil {
		return nil, err
	}
	return live, nil
}
