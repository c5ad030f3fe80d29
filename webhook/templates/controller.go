package templates

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/webhook/config"
)

// Client is what the controller needs of the API server: controller-runtime's
// client.Client, or a fake one in tests.
type Client interface {
	List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error
	Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error
	Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error
}

// Controller keeps the templates of Plan. Every write is one that leaves
// the same state whoever makes it, so two webhook replicas running it side
// by side agree: a create that finds the template there, or a delete that
// finds it gone, is the other replica's doing and is not an error.
type Controller struct {
	// Namespaces lists the namespaces opted in to injection (the
	// webhook's cache); Templates reads and writes the templates (live).
	Namespaces Client
	Templates  Client
	// Config is the webhook's current config, re-read on every pass.
	Config func() *config.Config
	// Resync is how often a pass runs without a change (a template deleted
	// by hand comes back within it); 0: one minute.
	Resync time.Duration
	Log    logr.Logger
}

// Run passes once, then on every signal on changes (a namespace's labels
// changed, the config changed) and every Resync, until ctx ends. A failed
// pass is logged and tried again on the next.
func (c *Controller) Run(ctx context.Context, changes <-chan struct{}) error {
	tick := time.NewTicker(cmp.Or(c.Resync, time.Minute))
	defer tick.Stop()
	for {
		if err := c.Reconcile(ctx); err != nil && ctx.Err() == nil {
			c.Log.Error(err, "aligned claim templates: pass failed; trying again on the next change or resync")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-tick.C:
		}
	}
}

// Reconcile makes one pass: reads the opted-in namespaces and the
// controller's templates, plans, and applies the plan.
func (c *Controller) Reconcile(ctx context.Context) error {
	cfg := c.Config()
	var optedIn []string
	if cfg.AlignedClaims.Enabled {
		var nss metav1.PartialObjectMetadataList
		nss.APIVersion, nss.Kind = "v1", "NamespaceList"
		if err := c.Namespaces.List(ctx, &nss, client.MatchingLabels{contract.LabelInject: contract.InjectEnabled}); err != nil {
			return fmt.Errorf("list opted-in namespaces: %w", err)
		}
		for _, ns := range nss.Items {
			optedIn = append(optedIn, ns.Name)
		}
	}
	var have resourceapi.ResourceClaimTemplateList
	err := c.Templates.List(ctx, &have, client.MatchingLabels{LabelManagedBy: Manager})
	switch {
	case err != nil && !cfg.AlignedClaims.Enabled && (meta.IsNoMatchError(err) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err)):
		// Off, on a cluster without resource.k8s.io (nothing of ours can
		// exist) or under RBAC from before the templates: nothing to do.
		return nil
	case err != nil:
		return fmt.Errorf("list aligned claim templates: %w", err)
	}
	existing := make([]*resourceapi.ResourceClaimTemplate, len(have.Items))
	for i := range have.Items {
		existing[i] = &have.Items[i]
	}
	plan, err := Plan(cfg, optedIn, existing)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range plan {
		if err := c.apply(ctx, a); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// apply makes one write of the plan.
func (c *Controller) apply(ctx context.Context, a Action) error {
	t := a.Template
	log := c.Log.WithValues("namespace", t.Namespace, "template", t.Name, "op", a.Op)
	switch a.Op {
	case Delete:
		if err := c.remove(ctx, t); err != nil {
			return err
		}
	case Replace:
		if err := c.remove(ctx, a.Existing); err != nil {
			return err
		}
		fallthrough
	case Create:
		err := c.Templates.Create(ctx, t.DeepCopy(), client.FieldOwner(Manager))
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s/%s: %w", t.Namespace, t.Name, err)
		}
	}
	log.V(1).Info("aligned claim template written")
	return nil
}

// remove deletes t if it is still the object read (its UID), so a template
// another replica has just created again is not removed.
func (c *Controller) remove(ctx context.Context, t *resourceapi.ResourceClaimTemplate) error {
	uid := t.UID
	err := c.Templates.Delete(ctx, t, client.Preconditions{UID: &uid})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete %s/%s: %w", t.Namespace, t.Name, err)
	}
	return nil
}
