package doctor

import (
	"fmt"
	"strings"

	"github.com/ibkube/ibkube/node/dra"
	"github.com/ibkube/ibkube/node/resource"
)

// CheckHeldTwice is the check that no HCA is held both ways by prepared
// DRA claims: exclusively by one and by another besides.
const CheckHeldTwice = "dra-held-twice"

// HeldTwiceFacts are what the DRA driver's CDI specs show of HCAs held
// both ways. Checked is false when no CDI directory was given; Error says
// why the specs could not be read.
type HeldTwiceFacts struct {
	Dir     string
	Checked bool
	Error   string
	Found   []dra.HeldTwice
}

// gatherHeldTwice reads the CDI specs the DRA driver wrote in dir; m
// resolves the device-named holds of agents before HCA holds.
func gatherHeldTwice(dir string, m *resource.Model) HeldTwiceFacts {
	if dir == "" {
		return HeldTwiceFacts{}
	}
	f := HeldTwiceFacts{Dir: dir, Checked: true}
	found, err := dra.HeldTwiceIn(dir, m)
	if err != nil {
		f.Error = err.Error()
	}
	f.Found = found
	return f
}

// checkHeldTwice fails when an HCA is held both ways: the scheduler then
// counts that HCA's shared counter below zero, and its allocator refuses
// every device of the node's pool that consumes a counter, so no rdma/ib
// and no new rdma/shared_ib is allocated on any HCA of the node until one
// holder ends (docs/dra-driver.md, "Held both ways").
func checkHeldTwice(f Facts) Result {
	h := f.HeldTwice
	res := Result{Name: CheckHeldTwice}
	switch {
	case !h.Checked:
		res.Status, res.Message = Pass, "not checked (no CDI directory given)"
	case h.Error != "":
		res.Status, res.Message = Warn, "cannot read the DRA driver's CDI specs: "+h.Error
		res.Fix = "run on the node as root, with --cdi-dir set to the agent's --cdi-dir"
	case len(h.Found) == 0:
		res.Status, res.Message = Pass, "no HCA held both ways by the DRA claims prepared in "+h.Dir
	default:
		msgs := make([]string, len(h.Found))
		for i, x := range h.Found {
			msgs[i] = x.String()
		}
		res.Status = Fail
		res.Message = strings.Join(msgs, "; ") + fmt.Sprintf(
			"; the scheduler counts each such HCA's counter below zero and allocates no rdma/ib or new rdma/shared_ib device of this node, on any of its HCAs, until one holder ends (specs in %s)", h.Dir)
		res.Fix = "end the pods of one side: find them by claim UID with " +
			"kubectl get resourceclaims -A -o custom-columns=UID:.metadata.uid,NAMESPACE:.metadata.namespace,NAME:.metadata.name,PODS:.status.reservedFor[*].name " +
			"and delete the sharers' (or the exclusive) pods; the claims date from before HCA holds or the slices' counters, which now keep this from recurring (docs/dra-driver.md, \"Held both ways\")"
	}
	return res
}
