package counters

import (
	"testing"

	"github.com/ibkube/ibkube/contract"
)

// The opt-out the agent reads is the annotation the webhook accepts and
// checks; a rename on one side alone would make the webhook refuse the key
// or the agent ignore it.
func TestIdleWarningAnnotationIsTheWebhooks(t *testing.T) {
	if contract.AnnotationIdleWarning != contract.AnnotationIdleWarning {
		t.Errorf("agent reads %q, webhook accepts %q", contract.AnnotationIdleWarning, contract.AnnotationIdleWarning)
	}
}
