package inventory

import "testing"

func ibHCA(name string, state string, keys ...PKey) HCA {
	p := Port{Number: 1, LinkLayer: LinkLayerInfiniBand, State: state}
	for i, k := range keys {
		p.PKeys = append(p.PKeys, PKeyEntry{Index: i, Key: k})
	}
	return HCA{Name: name, Ports: []Port{p}}
}

// TestNodePartition: across several ports, only a key every ACTIVE port
// holds is the node's, and the index handed to NCCL is one every port of
// the container agrees on.
func TestNodePartition(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		hcas   []HCA
		only   []string
		state  PartitionState
		label  string
		reason string
	}{
		{name: "agree", hcas: []HCA{ibHCA("mlx5_0", "ACTIVE", 0x800b, 0x7fff), ibHCA("mlx5_1", "ACTIVE", 0x7fff, 0x800b)},
			state: PartitionOK, label: "0x800b"},
		{name: "disagree", hcas: []HCA{ibHCA("mlx5_0", "ACTIVE", 0x800b, 0x7fff), ibHCA("mlx5_1", "ACTIVE", 0x800c, 0x7fff)},
			state: PartitionDisagree, reason: "ports share no tenant key: 0x800b on mlx5_0/1; 0x800c on mlx5_1/1"},
		{name: "a down port does not count", hcas: []HCA{ibHCA("mlx5_0", "ACTIVE", 0x800b), ibHCA("mlx5_1", "DOWN", 0x7fff)},
			state: PartitionOK, label: "0x800b"},
		{name: "no active port", hcas: []HCA{ibHCA("mlx5_0", "DOWN", 0x800b)},
			state: PartitionNoActivePort, reason: "no InfiniBand port is ACTIVE"},
		{name: "the container's HCAs only", hcas: []HCA{ibHCA("mlx5_0", "ACTIVE", 0x800b), ibHCA("mlx5_1", "ACTIVE", 0x800c)},
			only: []string{"mlx5_1"}, state: PartitionOK, label: "0x800c"},
		{name: "one shared of two", hcas: []HCA{ibHCA("mlx5_0", "ACTIVE", 0x800b, 0x8021), ibHCA("mlx5_1", "ACTIVE", 0x8021)},
			state: PartitionOK, label: "0x8021"},
		{name: "limited tenant key is no membership", hcas: []HCA{ibHCA("mlx5_0", "ACTIVE", 0x000b, 0x7fff)},
			state: PartitionDefaultOnly, reason: "only the default partition key, no full membership, on mlx5_0/1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var p Partition
			if tc.only != nil {
				p = HCAsPartition(tc.hcas, tc.only)
			} else {
				p = NodePartition(Node{HCAs: tc.hcas})
			}
			if p.State != tc.state || p.Label() != tc.label || p.Reason != tc.reason {
				t.Fatalf("got %+v label %q; want %s %q %q", p, p.Label(), tc.state, tc.label, tc.reason)
			}
		})
	}
}

func TestTenantIndex(t *testing.T) {
	t.Parallel()
	hcas := []HCA{ibHCA("mlx5_0", "ACTIVE", 0x7fff, 0x800b), ibHCA("mlx5_1", "ACTIVE", 0x7fff, 0x800b), ibHCA("mlx5_2", "ACTIVE", 0x800b, 0x7fff)}
	if i, ok := TenantIndex(hcas, []string{"mlx5_0", "mlx5_1"}, 0x800b); !ok || i != 1 {
		t.Errorf("same index: got %d %t, want 1", i, ok)
	}
	// NCCL takes one index for every HCA: differing tables give none.
	if _, ok := TenantIndex(hcas, []string{"mlx5_0", "mlx5_2"}, 0x800b); ok {
		t.Error("differing indexes gave an index")
	}
	if _, ok := TenantIndex(hcas, []string{"mlx5_9"}, 0x800b); ok {
		t.Error("no HCA gave an index")
	}
}

func TestPKeyForms(t *testing.T) {
	t.Parallel()
	k, err := ParsePKey("0x800b\n")
	if err != nil || k.String() != "0x800b" || k.UCX() != "0x000b" || !k.Tenant() {
		t.Fatalf("0x800b: %v %v %q %t", err, k, k.UCX(), k.Tenant())
	}
	for _, bad := range []string{"", "800b", "0x800", "0x800b0", "0xzzzz", "0X800B", "-0x1"} {
		if _, err := ParsePKey(bad); err == nil {
			t.Errorf("ParsePKey(%q) accepted", bad)
		}
	}
}
