package handler

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// metaReader is an in-memory client.Reader of PartialObjectMetadata.
type metaReader struct {
	objects map[string]metav1.ObjectMeta // "Kind ns/name"
	err     error                        // returned for every Get when set
	gets    int
}

func (r *metaReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.gets++
	if r.err != nil {
		return r.err
	}
	p := obj.(*metav1.PartialObjectMetadata)
	gvk := p.GroupVersionKind()
	m, ok := r.objects[gvk.Kind+" "+key.String()]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, key.Name)
	}
	p.ObjectMeta = m
	return nil
}

func (r *metaReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("not implemented")
}

func TestClientLookupNamespace(t *testing.T) {
	t.Parallel()
	on := map[string]string{contract.LabelInject: contract.InjectEnabled}
	tests := []struct {
		name        string
		cached      map[string]metav1.ObjectMeta
		live        map[string]metav1.ObjectMeta
		want        mutate.Namespace
		wantLiveGet bool
		wantErr     bool
	}{
		{
			name:   "cached and opted in: no live read",
			cached: map[string]metav1.ObjectMeta{"Namespace /a": {Name: "a", Labels: on, Annotations: map[string]string{"x": "y"}}},
			want:   mutate.Namespace{Name: "a", Labels: on, Annotations: map[string]string{"x": "y"}},
		},
		{
			name:        "cache lags behind a new label: live read wins",
			cached:      map[string]metav1.ObjectMeta{"Namespace /a": {Name: "a"}},
			live:        map[string]metav1.ObjectMeta{"Namespace /a": {Name: "a", Labels: on}},
			want:        mutate.Namespace{Name: "a", Labels: on},
			wantLiveGet: true,
		},
		{
			name:        "not in the cache yet: live read",
			live:        map[string]metav1.ObjectMeta{"Namespace /a": {Name: "a", Labels: on}},
			want:        mutate.Namespace{Name: "a", Labels: on},
			wantLiveGet: true,
		},
		{
			name:        "nowhere: error",
			wantLiveGet: true,
			wantErr:     true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cached, live := &metaReader{objects: tc.cached}, &metaReader{objects: tc.live}
			got, err := ClientLookup{Cached: cached, Live: live}.Namespace(context.Background(), "a")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if (live.gets > 0) != tc.wantLiveGet {
				t.Errorf("live reads = %d, want live read %v", live.gets, tc.wantLiveGet)
			}
			if err == nil {
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("namespace (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestClientLookupNetwork(t *testing.T) {
	t.Parallel()
	nad := map[string]metav1.ObjectMeta{"NetworkAttachmentDefinition ibkube-system/ibkube-ipoib": {Name: "ibkube-ipoib", Namespace: "ibkube-system"}}
	noMatch := &meta.NoKindMatchError{GroupKind: NetworkAttachmentDefinitionGVK.GroupKind(), SearchedVersions: []string{"v1"}}
	tests := []struct {
		name        string
		cached      *metaReader
		live        *metaReader
		want        bool
		wantMissing bool // ErrNetworkAPIMissing
		wantErr     bool
	}{
		{name: "in the cache", cached: &metaReader{objects: nad}, live: &metaReader{}, want: true},
		{name: "created a moment ago: live read", cached: &metaReader{}, live: &metaReader{objects: nad}, want: true},
		{name: "absent", cached: &metaReader{}, live: &metaReader{}, want: false},
		{name: "API not served", cached: &metaReader{err: noMatch}, live: &metaReader{}, wantMissing: true, wantErr: true},
		{name: "other failure", cached: &metaReader{err: errors.New("forbidden")}, live: &metaReader{}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ClientLookup{Cached: tc.cached, Live: tc.live}.NetworkExists(context.Background(), "ibkube-system", "ibkube-ipoib")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if errors.Is(err, ErrNetworkAPIMissing) != tc.wantMissing {
				t.Errorf("err = %v, want ErrNetworkAPIMissing %v", err, tc.wantMissing)
			}
			if got != tc.want {
				t.Errorf("exists = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestClientLookupRefusesBadNames: a name that is not a Kubernetes name never
// reaches a reader, so it never becomes part of an API path.
func TestClientLookupRefusesBadNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		namespace string // for both lookups
		nad       string // NetworkExists only
	}{
		{name: "path into another resource", namespace: "ibkube-system/secrets/ibkube-webhook-tls", nad: "ibkube-ipoib"},
		{name: "parent directory", namespace: "../../apis", nad: "ibkube-ipoib"},
		{name: "upper case", namespace: "Training", nad: "ibkube-ipoib"},
		{name: "empty", namespace: "", nad: "ibkube-ipoib"},
		{name: "query string", namespace: "a?watch=true", nad: "ibkube-ipoib"},
		{name: "64 characters", namespace: "a123456789012345678901234567890123456789012345678901234567890123", nad: "ibkube-ipoib"},
		{name: "NAD name with a slash", namespace: "training", nad: "x/../../secrets/y"},
		{name: "NAD name upper case", namespace: "training", nad: "IPoIB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cached, live := &metaReader{}, &metaReader{}
			l := ClientLookup{Cached: cached, Live: live}
			if _, err := l.NetworkExists(context.Background(), tc.namespace, tc.nad); !errors.Is(err, ErrBadName) {
				t.Errorf("NetworkExists(%q, %q): err = %v, want ErrBadName", tc.namespace, tc.nad, err)
			}
			if tc.nad == "ibkube-ipoib" {
				if _, err := l.Namespace(context.Background(), tc.namespace); !errors.Is(err, ErrBadName) {
					t.Errorf("Namespace(%q): err = %v, want ErrBadName", tc.namespace, err)
				}
			}
			if cached.gets+live.gets != 0 {
				t.Errorf("%d reads made with a bad name", cached.gets+live.gets)
			}
		})
	}
}
