//go:build chart

package chart

import (
	"testing"

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
