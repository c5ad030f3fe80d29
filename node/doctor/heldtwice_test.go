package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ibkube/ibkube/node/resource"
)

// TestHeldTwiceCheck: the check's verdict for each state of the CDI
// directory (the found case's full wording is in the ndv5-dra-held-twice
// golden).
func TestHeldTwiceCheck(t *testing.T) {
	t.Parallel()
	notDir := filepath.Join(t.TempDir(), "file")
	must(t, os.WriteFile(notDir, nil, 0o644))
	cases := []struct {
		name, dir string
		status    Status
		contains  string
	}{
		{"no directory given", "", Pass, "not checked"},
		{"no DRA claims on the node", filepath.Join(t.TempDir(), "absent"), Pass, "no HCA held both ways"},
		{"unreadable", notDir, Warn, "cannot read the DRA driver's CDI specs"},
		{"held both ways", filepath.Join("testdata", "cdi-held-twice"), Fail,
			"HCA mlx5_0 is held exclusively by claim 11111111-0000-4000-8000-000000000001 and also by claim 22222222-0000-4000-8000-000000000002"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := checkHeldTwice(Facts{HeldTwice: gatherHeldTwice(c.dir, &resource.Model{})})
			if r.Status != c.status || !strings.Contains(r.Message, c.contains) {
				t.Errorf("got %s %q, want %s containing %q", r.Status, r.Message, c.status, c.contains)
			}
			if r.Status != Pass && r.Fix == "" {
				t.Errorf("%s without a fix", r.Status)
			}
		})
	}
}
