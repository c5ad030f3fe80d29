package counters

import (
	"testing"

	"github.com/ibkube/ibkube/webhook/mutate"
)

// The opt-out the agent reads is the annotation the webhook accepts and
// checks; a rename on one side alone would make the webhook refuse the key
// or the agent ignore it.
func TestIdleWarningAnnotationIsTheWebhooks(t *testing.T) {
	if AnnotationIdleWarning != mutate.AnnotationIdleWarning {
		t.Errorf("agent reads %q, webhook accepts %q", AnnotationIdleWarning, mutate.AnnotationIdleWarning)
	}
}
