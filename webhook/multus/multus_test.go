package multus

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/internal/testing/errtest"
)

var ipoib = Network{Namespace: "ibkube-system", Name: "ibkube-ipoib", Interface: "net1"}

func TestMerge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		existing  string
		add       []Network
		podNS     string
		want      string
		wantMod   bool
		wantError string
	}{
		{
			name:    "empty value gets CSV",
			add:     []Network{ipoib},
			podNS:   "team-a",
			want:    "ibkube-system/ibkube-ipoib@net1",
			wantMod: true,
		},
		{
			name:     "blank value gets CSV",
			existing: "  ",
			add:      []Network{ipoib, {Name: "roce"}},
			podNS:    "team-a",
			want:     "ibkube-system/ibkube-ipoib@net1, roce",
			wantMod:  true,
		},
		{
			name:     "nothing to add keeps the value byte for byte",
			existing: " foo ,bar@eth9 ",
			podNS:    "team-a",
			want:     " foo ,bar@eth9 ",
		},
		{
			name:     "CSV user entries first, ours appended",
			existing: "team-a/storage@net5,  monitoring",
			add:      []Network{ipoib},
			podNS:    "team-a",
			want:     "team-a/storage@net5,  monitoring, ibkube-system/ibkube-ipoib@net1",
			wantMod:  true,
		},
		{
			name:     "spiderpool 5099: UPDATE of a pod we already mutated adds nothing",
			existing: "team-a/storage, ibkube-system/ibkube-ipoib@net1",
			add:      []Network{ipoib},
			podNS:    "team-a",
			want:     "team-a/storage, ibkube-system/ibkube-ipoib@net1",
		},
		{
			name:     "spiderpool 5099 in JSON form",
			existing: `[{"name":"ibkube-ipoib","namespace":"ibkube-system","interface":"net1"}]`,
			add:      []Network{ipoib},
			podNS:    "team-a",
			want:     `[{"name":"ibkube-ipoib","namespace":"ibkube-system","interface":"net1"}]`,
		},
		{
			name:     "user names the IPoIB network with their own interface: theirs wins",
			existing: "ibkube-system/ibkube-ipoib@ib0",
			add:      []Network{ipoib},
			podNS:    "team-a",
			want:     "ibkube-system/ibkube-ipoib@ib0",
		},
		{
			name:     "user names the IPoIB network without namespace, pod in the release namespace",
			existing: "ibkube-ipoib",
			add:      []Network{ipoib},
			podNS:    "ibkube-system",
			want:     "ibkube-ipoib",
		},
		{
			name:     "same name in another namespace is another network",
			existing: "ibkube-ipoib@ib0",
			add:      []Network{ipoib},
			podNS:    "team-a",
			want:     "ibkube-ipoib@ib0, ibkube-system/ibkube-ipoib@net1",
			wantMod:  true,
		},
		{
			name:     "user JSON with options and unknown fields survives",
			existing: "[\n  {\"name\": \"ibkube-ipoib\", \"namespace\": \"ibkube-system\", \"interface\": \"ib0\", \"ips\": [\"198.18.200.7/24\"], \"x-vendor\": {\"a\": 1}}\n]",
			add:      []Network{ipoib},
			podNS:    "team-a",
			want:     "[\n  {\"name\": \"ibkube-ipoib\", \"namespace\": \"ibkube-system\", \"interface\": \"ib0\", \"ips\": [\"198.18.200.7/24\"], \"x-vendor\": {\"a\": 1}}\n]",
		},
		{
			name:     "JSON append keeps the user's bytes",
			existing: "[ {\"name\":\"storage\", \"x-vendor\":true} ]\n",
			add:      []Network{ipoib},
			podNS:    "team-a",
			want:     "[ {\"name\":\"storage\", \"x-vendor\":true}," + `{"name":"ibkube-ipoib","namespace":"ibkube-system","interface":"net1"}` + "]\n",
			wantMod:  true,
		},
		{
			name:     "empty JSON list stays JSON",
			existing: "[]",
			add:      []Network{{Name: "roce"}},
			podNS:    "team-a",
			want:     `[{"name":"roce"}]`,
			wantMod:  true,
		},
		{
			name:     "one network per HCA: all added, in order",
			existing: "storage",
			add:      []Network{{Name: "rdma", Interface: "net1"}, {Name: "rdma", Interface: "net2"}, {Name: "rdma", Interface: "net3"}},
			podNS:    "team-a",
			want:     "storage, rdma@net1, rdma@net2, rdma@net3",
			wantMod:  true,
		},
		{
			name:     "one network per HCA: user already has one of them",
			existing: "rdma@net2",
			add:      []Network{{Name: "rdma", Interface: "net1"}, {Name: "rdma", Interface: "net2"}},
			podNS:    "team-a",
			want:     "rdma@net2, rdma@net1",
			wantMod:  true,
		},
		{
			name:     "one network per HCA: reinvocation adds nothing",
			existing: "rdma@net2, rdma@net1",
			add:      []Network{{Name: "rdma", Interface: "net1"}, {Name: "rdma", Interface: "net2"}},
			podNS:    "team-a",
			want:     "rdma@net2, rdma@net1",
		},
		{
			name:     "user's duplicate entries are theirs to keep",
			existing: "foo, foo",
			add:      []Network{{Name: "bar"}},
			podNS:    "team-a",
			want:     "foo, foo, bar",
			wantMod:  true,
		},
		{
			name:      "interface taken by another network",
			existing:  "storage@net1",
			add:       []Network{ipoib},
			podNS:     "team-a",
			wantError: `interface "net1" is already requested for network storage@net1`,
		},
		{
			name:      "malformed CSV: two slashes",
			existing:  "a/b/c",
			add:       []Network{ipoib},
			wantError: `entry 1 "a/b/c": more than one '/'`,
		},
		{
			name:      "malformed CSV: stray comma",
			existing:  "a,,b",
			add:       []Network{ipoib},
			wantError: `entry 2: empty entry`,
		},
		{
			name:      "malformed CSV: upper case",
			existing:  "ok, Team/net",
			add:       []Network{ipoib},
			wantError: `namespace "Team" is not a lower-case DNS label`,
		},
		{
			name:      "malformed CSV: empty interface",
			existing:  "net@",
			wantError: `empty interface name after '@'`,
		},
		{
			name:      "malformed JSON",
			existing:  `[{"name":"a"`,
			add:       []Network{ipoib},
			wantError: `not a JSON list`,
		},
		{
			name:      "JSON object instead of list",
			existing:  `{"name":"a"}`,
			wantError: `not a JSON list`,
		},
		{
			name:      "JSON element without name",
			existing:  `[{"name":"a"},{"interface":"net2"}]`,
			wantError: `entry 2 "{\"interface\":\"net2\"}": network name is empty`,
		},
		{
			name:      "JSON element of the wrong type",
			existing:  `["a"]`,
			wantError: `entry 1 "\"a\"": not a JSON object`,
		},
		{
			name:      "JSON known field of the wrong type",
			existing:  `[{"name":"a","ips":"10.0.0.1"}]`,
			wantError: `invalid network selection element`,
		},
		{
			name:      "bad network to add",
			add:       []Network{{Name: "Bad_Name"}},
			wantError: `network to add "Bad_Name"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, changed, err := Merge(tt.existing, tt.add, tt.podNS)
			if tt.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantError) {
					t.Fatalf("Merge() error = %v, want one containing %q", err, tt.wantError)
				}
				if got != tt.existing || changed {
					t.Errorf("Merge() on error = %q, %v; want the existing value, false", got, changed)
				}
				return
			}
			if err != nil {
				t.Fatalf("Merge() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Merge() value (-want +got):\n%s", diff)
			}
			if changed != tt.wantMod {
				t.Errorf("Merge() changed = %v, want %v", changed, tt.wantMod)
			}
			if DetectForm(tt.existing) == FormJSON && !json.Valid([]byte(got)) {
				t.Errorf("Merge() wrote invalid JSON %q", got)
			}
			again, changed2, err := Merge(got, tt.add, tt.podNS)
			if err != nil || changed2 || again != got {
				t.Errorf("second Merge() = %q, %v, %v; want %q unchanged (idempotent)", again, changed2, err, got)
			}
		})
	}
}

func TestMalformedErrorsSayWhatIsAccepted(t *testing.T) {
	t.Parallel()
	_, _, err := Merge("a/b/c", nil, "ns")
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("Merge() error = %T %v, want *FormatError", err, err)
	}
	errtest.Names(t, err, Annotation, "accepted:", "[namespace/]name[@interface]", "JSON list")
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value string
		want  []Network
	}{
		{name: "blank", value: " "},
		{
			name:  "CSV with spaces",
			value: " a , ns1/b@net3,c@eth1 ",
			want:  []Network{{"pod-ns", "a", ""}, {"ns1", "b", "net3"}, {"pod-ns", "c", "eth1"}},
		},
		{
			name:  "JSON",
			value: `[{"name":"a"},{"name":"b","namespace":"ns1","interface":"net3","mac":"02:00:00:00:00:01"}]`,
			want:  []Network{{"pod-ns", "a", ""}, {"ns1", "b", "net3"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tt.value, "pod-ns")
			if err != nil {
				t.Fatalf("Parse() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNetworkString(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		n    Network
		want string
	}{
		{Network{Name: "a"}, "a"},
		{Network{Namespace: "ns", Name: "a"}, "ns/a"},
		{ipoib, "ibkube-system/ibkube-ipoib@net1"},
	} {
		if got := tt.n.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.n, got, tt.want)
		}
	}
}

// selects reports whether value already selects n's NAD (same namespace and
// name, any interface): the fuzz oracle for Merge.
func selects(value, podNamespace string, n Network) (bool, error) {
	nets, err := Parse(value, podNamespace)
	if err != nil {
		return false, err
	}
	k := n.key(podNamespace)
	for _, e := range nets {
		if e.key(podNamespace) == k {
			return true, nil
		}
	}
	return false, nil
}
