// Package templates keeps the aligned GPU+HCA claim's ResourceClaimTemplates
// (webhook/aligned) in every namespace opted in to injection, so admission
// only names a template and creates nothing: the webhook's mutation points
// a pod at the template of its shape (mutate.AlignedShapes), and this
// controller makes sure it is there. The plan is pure (Plan); Controller
// applies it through a client, at the edge.
package templates

import (
	"fmt"
	"maps"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/ibkube/ibkube/webhook/aligned"
	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// Manager is the field manager of the templates' writes and the value of
// their LabelManagedBy: the controller changes or removes only templates
// that carry it.
const (
	Manager        = "ibkube-webhook"
	LabelManagedBy = "app.kubernetes.io/managed-by"
)

// Desired are the templates namespace holds under cfg: one per kept shape,
// labelled as the controller's; none with alignedClaims off.
func Desired(cfg *config.Config, namespace string) ([]*resourceapi.ResourceClaimTemplate, error) {
	shapes := mutate.AlignedShapes(cfg)
	out := make([]*resourceapi.ResourceClaimTemplate, 0, len(shapes))
	for _, s := range shapes {
		t, err := aligned.Template(s, namespace)
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", s.Name(), err)
		}
		t.Labels = map[string]string{LabelManagedBy: Manager}
		out = append(out, t)
	}
	return out, nil
}

// Op is what an Action does.
type Op string

const (
	// Create a template that is missing.
	Create Op = "create"
	// Replace a template whose spec differs: a template's spec is
	// immutable, so it is deleted (on its UID) and created again.
	Replace Op = "replace"
	// Delete a template no longer desired: its namespace left injection,
	// its shape is no longer kept, or alignedClaims was turned off.
	Delete Op = "delete"
)

// Action is one write: Template is the desired template (Create,
// Replace), or the existing one (Delete); Existing is the template a
// Replace removes.
type Action struct {
	Op       Op
	Template *resourceapi.ResourceClaimTemplate
	Existing *resourceapi.ResourceClaimTemplate
}

// Plan compares the templates the opted-in namespaces should hold under
// cfg with the controller's existing ones (those carrying LabelManagedBy)
// and returns the writes that make them equal, in namespace and name order;
// none when they are.
func Plan(cfg *config.Config, optedIn []string, existing []*resourceapi.ResourceClaimTemplate) ([]Action, error) {
	have := make(map[string]*resourceapi.ResourceClaimTemplate, len(existing))
	for _, t := range existing {
		have[t.Namespace+"/"+t.Name] = t
	}
	var out []Action
	for _, ns := range slices.Sorted(slices.Values(optedIn)) {
		want, err := Desired(cfg, ns)
		if err != nil {
			return nil, err
		}
		for _, t := range want {
			key := ns + "/" + t.Name
			old, ok := have[key]
			delete(have, key)
			switch {
			case !ok:
				out = append(out, Action{Op: Create, Template: t})
			case !equality.Semantic.DeepEqual(old.Spec, t.Spec):
				out = append(out, Action{Op: Replace, Template: t, Existing: old})
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(have)) {
		out = append(out, Action{Op: Delete, Template: have[key]})
	}
	return out, nil
}
