//go:build chart || integration

package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The chart's NADs are the objects docs/networks.md documents, kept under
// testdata/networks and reviewed by hand: a values change that alters what a
// user's pods attach to shows up here. Compare spec.config as JSON and the
// resourceName annotation.
func TestNetworksMatchTheDocumentedNADs(t *testing.T) {
	for _, tc := range []struct {
		values string   // under testdata, "" = defaults
		extra  []string // more helm args
		nad    string   // NAD name in the render
		golden string   // testdata/networks/<golden>.yaml
	}{
		{extra: []string{"--api-versions", "k8s.cni.cncf.io/v1"}, nad: "ibkube-ipoib", golden: "ipoib-default"},
		{values: "ipoib-mtu-exclude", nad: "ibkube-ipoib", golden: "ipoib-mtu-exclude"},
		{extra: []string{"--set", "networks.ipoibExclusive.enabled=true"}, nad: "ibkube-ipoib-exclusive", golden: "rdma-exclusive-ipoib-allocated"},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			t.Parallel()
			args := tc.extra
			if tc.values != "" {
				args = append(args, "-f", filepath.Join("testdata", tc.values+".values.yaml"))
			}
			out, err := render(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			var got *unstructured.Unstructured
			for _, o := range decodeAll(t, out) {
				if o.GetKind() == "NetworkAttachmentDefinition" && o.GetName() == tc.nad {
					got = o
				}
			}
			if got == nil {
				t.Fatalf("render has no NetworkAttachmentDefinition %s", tc.nad)
			}
			data, err := os.ReadFile(filepath.Join("testdata", "networks", tc.golden+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			want := decodeAll(t, string(data))[0]
			if diff := cmp.Diff(configJSON(t, want), configJSON(t, got)); diff != "" {
				t.Errorf("spec.config differs from testdata/networks/%s.yaml (-documented +chart):\n%s", tc.golden, diff)
			}
			if diff := cmp.Diff(want.GetAnnotations(), got.GetAnnotations()); diff != "" {
				t.Errorf("annotations differ (-documented +chart):\n%s", diff)
			}
			if got.GetNamespace() != want.GetNamespace() {
				t.Errorf("namespace %q, want %q", got.GetNamespace(), want.GetNamespace())
			}
		})
	}
}

func configJSON(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	s, _, err := unstructured.NestedString(o.Object, "spec", "config")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("spec.config of %s is not JSON: %v\n%s", o.GetName(), err, s)
	}
	return m
}
