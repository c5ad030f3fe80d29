package policy_test

import (
	"errors"
	"testing"

	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/policy"
)

// TestRenderRefusesAlignedClaims: the policies cannot keep the aligned
// claim's templates, so a config asking for it is refused rather than
// rendered into policies that silently keep extended resources.
func TestRenderRefusesAlignedClaims(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.AlignedClaims.Enabled = true
	_, err := policy.Render(cfg, policy.Names{Prefix: "p", Namespace: "ns"})
	if !errors.Is(err, policy.ErrAlignedClaims) {
		t.Fatalf("Render = %v, want ErrAlignedClaims", err)
	}
}
