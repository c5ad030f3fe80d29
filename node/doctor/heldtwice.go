package doctor

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/ibkube/ibkube/node/dra/holds"
	"github.com/ibkube/ibkube/node/resource"
)

// CheckHeldTwice is the check of HCAs that claims prepared by the DRA
// driver hold both exclusively and otherwise.
const CheckHeldTwice = "held-both-ways"

// HoldsFacts are what the DRA driver's CDI specs record.
type HoldsFacts struct {
	// CDIDir is where they were read; "" when not checked.
	CDIDir string
	// Absent: the directory does not exist, so no claim was prepared
	// here by the DRA driver (a device-plugin node).
	Absent bool
	// Claims counts the readable specs of the driver.
	Claims    int
	HeldTwice []holds.HeldTwice
	// Unreadable names each spec of the driver that could not be read or
	// decoded, and why; Error says why the directory could not be listed.
	Unreadable []string
	Error      string
}

// gatherHolds reads the driver's specs in dir; legacy device-named holds
// resolve through m, the model the agent would build.
func gatherHolds(dir string, m *resource.Model) HoldsFacts {
	f := HoldsFacts{CDIDir: dir}
	if dir == "" {
		return f
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		f.Absent = true
		return f
	}
	l, err := holds.List(dir, nil)
	if err != nil {
		f.Error = err.Error()
		return f
	}
	f.Claims = len(l.Holds)
	f.HeldTwice = holds.FindHeldTwice(l.Holds, m)
	for _, err := range l.Unreadable {
		f.Unreadable = append(f.Unreadable, err.Error())
	}
	return f
}

// findClaims is how a person turns the claim UIDs named into claims and
// their pods.
const findClaims = "`kubectl get resourceclaims -A -o custom-columns=UID:.metadata.uid,NAMESPACE:.metadata.namespace,CLAIM:.metadata.name,PODS:.status.reservedFor[*].name` finds the claims by UID"

// checkHeldTwice fails on an HCA held both ways: the scheduler then
// allocates no rdma device of the node at all (holds.SchedulerEffect).
func checkHeldTwice(f Facts) Result {
	h := f.Holds
	res := Result{Name: CheckHeldTwice}
	unreadable := "cannot read " + strings.Join(h.Unreadable, "; ")
	switch {
	case h.CDIDir == "":
		res.Status, res.Message = Skip, "not checked (no CDI directory given)"
	case h.Absent:
		res.Status, res.Message = Skip, fmt.Sprintf("no CDI directory %s: no claim prepared by the DRA driver here (a device-plugin node)", h.CDIDir)
	case h.Error != "":
		res.Status, res.Message = Warn, h.Error
		res.Fix = "run on the node as root, with --cdi-dir set to the agent's"
	case len(h.HeldTwice) > 0:
		var held []string
		for _, t := range h.HeldTwice {
			held = append(held, t.String())
		}
		res.Status, res.Message = Fail, strings.Join(held, "; ")+": "+holds.SchedulerEffect
		if len(h.Unreadable) > 0 {
			res.Message += "; also " + unreadable
		}
		res.Fix = `end the pods of one side's claims (` + findClaims + `); docs/dra-driver.md, "Held both ways"`
	case len(h.Unreadable) > 0:
		res.Status, res.Message = Warn, fmt.Sprintf("%d claims' CDI specs read, %s", h.Claims, unreadable)
		res.Fix = "the DRA driver cannot tell what such a spec holds, so its HCAs may be prepared for another claim; " +
			"if no claim has the UID in the file's name (" + findClaims + "), remove the file"
	default:
		res.Status, res.Message = Pass, fmt.Sprintf("%d claims prepared by the DRA driver in %s; no HCA held both ways", h.Claims, h.CDIDir)
	}
	return res
}
