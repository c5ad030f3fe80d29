package doctor

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/internal/testing/nodetest"
	"github.com/ibkube/ibkube/node/config"
	"github.com/ibkube/ibkube/node/resource"
)

// TestHeldTwiceCheck reads fixture CDI directories as the DRA driver
// leaves them on an ND H100 v5 node (testdata/cdi): claim specs named
// after their UIDs, holds in their annotations, another vendor's spec
// beside them.
func TestHeldTwiceCheck(t *testing.T) {
	t.Parallel()
	node := filepath.Join(t.TempDir(), "node")
	must(t, fixture.Build(node, fixture.NDv5))
	model := resource.Build(config.Default(), nodetest.Scan(t, node), resource.Options{})
	const effect = ": the scheduler sees its counter over-committed and allocates no rdma device of this node, on any HCA, until one of those claims' pods ends"
	tests := []struct {
		dir     string
		status  Status
		message string
	}{
		{"", Skip, "not checked (no CDI directory given)"},
		{"testdata/cdi/absent", Skip, "no CDI directory testdata/cdi/absent: no claim prepared by the DRA driver here (a device-plugin node)"},
		{"testdata/cdi/none", Pass, "2 claims prepared by the DRA driver in testdata/cdi/none; no HCA held both ways"},
		{"testdata/cdi/held-both-ways", Fail, "HCA mlx5_1 is held exclusively by claim 00000001-0000-4000-8000-000000000001 and also by claim 00000002-0000-4000-8000-000000000002, 00000003-0000-4000-8000-000000000003" + effect},
		// An agent before HCA holds recorded the exclusive device by name.
		{"testdata/cdi/legacy", Fail, "HCA mlx5_3 is held exclusively by claim 00000004-0000-4000-8000-000000000004 and also by claim 00000005-0000-4000-8000-000000000005" + effect},
		{"testdata/cdi/garbage", Warn, "1 claims' CDI specs read, cannot read testdata/cdi/garbage/rdma.infiniband.azure.com-hca_00000006-0000-4000-8000-000000000006.json: not a CDI spec (JSON): unexpected end of JSON input"},
	}
	for _, tc := range tests {
		got := checkHeldTwice(Facts{Holds: gatherHolds(tc.dir, model)})
		want := Result{Name: CheckHeldTwice, Status: tc.status, Message: tc.message, Fix: got.Fix}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tc.dir, diff)
		}
		if (tc.status == Fail || tc.status == Warn) && !strings.Contains(got.Fix, "custom-columns=UID:.metadata.uid") {
			t.Errorf("%q: the fix %q does not say how to find the claims by UID", tc.dir, got.Fix)
		}
		if tc.status == Fail && !strings.Contains(got.Fix, `docs/dra-driver.md, "Held both ways"`) {
			t.Errorf("%q: the fix %q does not point at the doc section", tc.dir, got.Fix)
		}
	}
}
