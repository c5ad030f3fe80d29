//go:build integration

package webhook

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/testenv"
	"github.com/ibkube/ibkube/webhook/templates"
)

// testAligned turns alignedClaims on in the running webhook's config file:
// its controller writes the templates into the opted-in namespace, and a
// GPU pod created through the API server comes back holding the aligned
// claim, from a template that is there. Turned off again, the templates go.
func (e *env) testAligned(t *testing.T) {
	ctx := context.Background()
	selector := metav1.ListOptions{LabelSelector: templates.LabelManagedBy + "=" + templates.Manager}
	e.cfgDir.Write(t, "apiVersion: ibkube.io/v1alpha1\nkind: WebhookConfig\nalignedClaims:\n  enabled: true\n")
	n := 0
	testenv.Eventually(t, 30*time.Second, "aligned pod from a kept template", func() error {
		n++
		annos := map[string]string{contract.AnnotationMode: contract.ModeExclusive, contract.AnnotationProfile: "ndv5"}
		got, _, err := e.create(t, "rdma", pod(fmt.Sprintf("aligned-%d", n), annos, 4))
		if err != nil {
			return err
		}
		rc := got.Spec.ResourceClaims
		if len(rc) != 1 || rc[0].Name != contract.AlignedClaim || rc[0].ResourceClaimTemplateName == nil {
			return fmt.Errorf("resourceClaims %v, want the aligned claim", rc)
		}
		if _, ok := got.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]; ok {
			return errors.New("the GPUs stayed in limits")
		}
		_, err = e.cs.ResourceV1().ResourceClaimTemplates("rdma").Get(ctx, *rc[0].ResourceClaimTemplateName, metav1.GetOptions{})
		return err
	})
	if l, err := e.cs.ResourceV1().ResourceClaimTemplates("plain").List(ctx, selector); err != nil || len(l.Items) > 0 {
		t.Errorf("plain namespace, not opted in: templates %v, %v", l, err)
	}

	e.cfgDir.Write(t, "apiVersion: ibkube.io/v1alpha1\nkind: WebhookConfig\n")
	testenv.Eventually(t, 30*time.Second, "templates removed", func() error {
		l, err := e.cs.ResourceV1().ResourceClaimTemplates("").List(ctx, selector)
		if err != nil {
			return err
		}
		if len(l.Items) > 0 {
			return fmt.Errorf("%d templates left", len(l.Items))
		}
		return nil
	})
}
