package templates

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ibkube/ibkube/webhook/config"
)

// noResourceAPI is a cluster that serves no resource.k8s.io.
type noResourceAPI struct{}

func (noResourceAPI) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "resource.k8s.io", Kind: "ResourceClaimTemplate"}}
}
func (noResourceAPI) Create(context.Context, client.Object, ...client.CreateOption) error { return nil }
func (noResourceAPI) Delete(context.Context, client.Object, ...client.DeleteOption) error { return nil }

// TestReconcileWithoutTheAPI: with the feature off, a cluster without
// resource.k8s.io is nothing to report (every webhook runs the controller);
// with it on, it is an error, as no aligned pod can run there.
func TestReconcileWithoutTheAPI(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg     *config.Config
		wantErr bool
	}{{config.Default(), false}, {on(), true}} {
		c := &Controller{Namespaces: noResourceAPI{}, Templates: noResourceAPI{}, Config: func() *config.Config { return tc.cfg }, Log: logr.Discard()}
		if err := c.Reconcile(t.Context()); (err != nil) != tc.wantErr {
			t.Errorf("alignedClaims %t: Reconcile = %v, want error %t", tc.cfg.AlignedClaims.Enabled, err, tc.wantErr)
		}
	}
}
