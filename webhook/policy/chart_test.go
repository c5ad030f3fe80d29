package policy_test

import (
	"path/filepath"
	"testing"

	"github.com/ibkube/ibkube/internal/testing/golden"
	"github.com/ibkube/ibkube/webhook/policy"
)

// TestChartDataCurrent keeps the chart's copy of the policies' CEL and of
// the built-in profiles equal to what this package renders (rerun with
// -update, or make policy-chart, after changing either).
func TestChartDataCurrent(t *testing.T) {
	t.Parallel()
	got, err := policy.ChartData()
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("..", "..", "charts", "ibkube", "files", "admission-policy.yaml"), got)
}
