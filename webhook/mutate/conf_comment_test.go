package mutate

import (
	"strings"
	"testing"

	"github.com/ibkube/ibkube/nccl"
)

// TestConfCommentsSetNothing: NCCL before 2.26.2 skips no '#' line of a
// conf file; it sets a variable from any line holding '=' and skips only
// lines without one (NVIDIA/nccl v2.25.1-1 src/misc/param.cc setEnvFile).
// So a comment the webhook writes must hold no '=', for every profile,
// whole node or not.
func TestConfCommentsSetNothing(t *testing.T) {
	t.Parallel()
	for _, p := range nccl.Builtin() {
		for _, whole := range []bool{false, true} {
			conf := ncclConf(confInput{profileName: p.Name, modeName: "rdma-exclusive", profile: p, wholeNode: whole})
			for _, l := range strings.Split(conf, "\n") {
				if strings.HasPrefix(l, "#") && strings.Contains(l, "=") {
					t.Errorf("profile %s (whole node %v): comment %q holds '=', which NCCL < 2.26.2 reads as a variable", p.Name, whole, l)
				}
			}
		}
	}
}
