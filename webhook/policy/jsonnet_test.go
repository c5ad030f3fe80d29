package policy

import (
	"regexp"
	"testing"

	"github.com/ibkube/ibkube/internal/testing/corpus"
	"github.com/ibkube/ibkube/webhook/multus"
)

// TestNetworksPatternsRefuseWhatTheWebhookRefuses: over random JSON
// networks values, the patterns the policies refuse with find exactly the
// values multus.ParseSelection refuses.
func TestNetworksPatternsRefuseWhatTheWebhookRefuses(t *testing.T) {
	t.Parallel()
	shape := regexp.MustCompile(netListShape())
	bad := regexp.MustCompile(netElemBad())
	t.Logf("pattern sizes: shape %d, bad elements %d bytes", len(shape.String()), len(bad.String()))
	differ := 0
	for i, v := range corpus.RandomNetworks(29, 20_000) {
		if multus.DetectForm(v) != multus.FormJSON {
			continue // a scalar reads as CSV ("0", "null")
		}
		_, err := multus.ParseSelection(v)
		refused := !shape.MatchString(v) || bad.MatchString(v)
		if refused != (err != nil) {
			differ++
			t.Errorf("value %d %s: patterns refuse %t; webhook: %v", i, v, refused, err)
		}
		if differ > 20 {
			t.Fatal("too many differences")
		}
	}
}
