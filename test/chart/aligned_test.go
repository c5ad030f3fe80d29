//go:build chart

package chart

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/ibkube/ibkube/internal/testing/errtest"
)

// TestAlignedClaimsNeedTheWebhook: admission.mode policy has no controller
// to keep the aligned claim's templates, so the render fails naming the
// value rather than installing policies that ignore it.
func TestAlignedClaimsNeedTheWebhook(t *testing.T) {
	t.Parallel()
	_, err := render(t, "--set", "admission.mode=policy", "--set", "webhook.config.alignedClaims.enabled=true")
	errtest.Names(t, err, "webhook.config.alignedClaims.enabled", "admission.mode policy", "admission.mode webhook")
	if _, err := render(t, "--set", "admission.mode=policy", "--set", "webhook.config.alignedClaims.enabled=false"); err != nil {
		t.Errorf("policy mode with alignedClaims off: %v", err)
	}
}

// TestAlignedClaimsRBAC: the webhook may always list and delete the
// templates (turning the feature off removes them), and create them only
// while it is on.
func TestAlignedClaimsRBAC(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set  []string
		want []string
	}{
		{nil, []string{"list", "delete"}},
		{[]string{"webhook.config.alignedClaims.enabled=true"}, []string{"list", "delete", "create"}},
	} {
		m, err := draRender(t, "1.36.0", tc.set...)
		if err != nil {
			t.Fatal(err)
		}
		role := typed[rbacv1.ClusterRole](t, m, "ClusterRole/ibkube-webhook")
		var got []string
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, "resource.k8s.io") && slices.Contains(r.Resources, "resourceclaimtemplates") {
				got = append(got, r.Verbs...)
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%v: resourceclaimtemplates verbs (-want +got):\n%s", tc.set, diff)
		}
	}
}
