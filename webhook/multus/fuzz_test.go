package multus

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzMerge checks, for any annotation value, that Merge never panics, that
// a successful Merge keeps the user's entries first and in order, selects
// every added network, and is idempotent (no duplicate on reinvocation).
func FuzzMerge(f *testing.F) {
	for _, seed := range []string{
		"", "a", "ns/a@net1, b", "a/b/c", "a,,b", "@", "/", "a@b@c",
		`[]`, `[{"name":"a","x":1}]`, `[{"name":"ibkube-ipoib","namespace":"ibkube-system","interface":"net1"}]`,
		`[null]`, `{"name":"a"}`, `"a"`, `[{"name":"a","cni-args":{"k":"v"}}] `,
	} {
		f.Add(seed, "net1")
	}
	f.Fuzz(func(t *testing.T, existing, iface string) {
		add := []Network{ipoib, {Name: "rdma", Interface: iface}}
		before, perr := Parse(existing, "pod-ns")
		value, changed, err := Merge(existing, add, "pod-ns")
		if err != nil {
			var fe *FormatError
			if perr != nil && !errors.As(err, &fe) {
				t.Fatalf("Merge(%q) error = %T %v, want *FormatError for a value Parse rejects", existing, err, err)
			}
			if value != existing || changed {
				t.Fatalf("Merge(%q) returned %q, %v with an error", existing, value, changed)
			}
			return
		}
		if perr != nil {
			t.Fatalf("Parse(%q) failed (%v) but Merge succeeded", existing, perr)
		}
		after, err := Parse(value, "pod-ns")
		if err != nil {
			t.Fatalf("Merge(%q) = %q, which does not parse: %v", existing, value, err)
		}
		if len(after) < len(before) {
			t.Fatalf("Merge(%q) = %q lost entries", existing, value)
		}
		for i := range before {
			if before[i] != after[i] {
				t.Fatalf("Merge(%q) = %q changed entry %d: %v -> %v", existing, value, i+1, before[i], after[i])
			}
		}
		if !changed && value != existing {
			t.Fatalf("Merge(%q) = %q but changed=false", existing, value)
		}
		if DetectForm(existing) == FormJSON && !json.Valid([]byte(value)) {
			t.Fatalf("Merge(%q) = %q: invalid JSON", existing, value)
		}
		for _, a := range add {
			if ok, _ := selects(value, "pod-ns", a); !ok {
				t.Fatalf("Merge(%q) = %q does not select %v", existing, value, a)
			}
		}
		again, changed2, err := Merge(value, add, "pod-ns")
		if err != nil || changed2 || again != value {
			t.Fatalf("Merge(Merge(%q)) = %q, %v, %v; want %q unchanged", existing, again, changed2, err, value)
		}
	})
}
