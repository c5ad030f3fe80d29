package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ibkube/ibkube/hca/selector"
)

func TestParse(t *testing.T) {
	t.Parallel()
	const head = "apiVersion: ibkube.io/v1alpha1\nkind: AgentConfig\n"
	tests := []struct {
		name    string
		in      string
		want    *AgentConfig
		wantErr string
	}{
		{name: "empty file is the defaults", in: head, want: Default()},
		{
			name: "shared pool gets default slots, other fields kept",
			in: head + `profile: Standard_ND96isr_H100_v5
rescanPeriod: 2s
pools:
- resourceName: example.com/roce
  mode: shared
  selector:
    linkLayers: [Ethernet]
    exclude:
    - names: ["mlx5_1*"]
`,
			want: &AgentConfig{
				APIVersion: APIVersion, Kind: Kind, Profile: "Standard_ND96isr_H100_v5",
				RescanPeriod: duration(2 * time.Second),
				Pools: []Pool{{ResourceName: "example.com/roce", Mode: ModeShared, Slots: 63, Selector: selector.Selector{
					Match:   selector.Match{LinkLayers: []string{"Ethernet"}},
					Exclude: []selector.Match{{Names: []string{"mlx5_1*"}}},
				}}},
			},
		},
		{
			name: "management devices opted into",
			in:   head + "pools:\n- {resourceName: example.com/ib-diag, mode: exclusive, managementDevices: [umad, issm]}\n",
			want: &AgentConfig{
				APIVersion: APIVersion, Kind: Kind, RescanPeriod: duration(DefaultRescanPeriod),
				Pools: []Pool{{ResourceName: "example.com/ib-diag", Mode: ModeExclusive, ManagementDevices: []string{"umad", "issm"}}},
			},
		},
		{name: "unknown management device", in: head + "pools:\n- {resourceName: rdma/ib, mode: exclusive, managementDevices: [uverbs]}\n", wantErr: `pools[0].managementDevices[0]: "uverbs" is not a management device; accepted: umad, issm (uverbs and rdma_cm are always given)`},
		{name: "management device twice", in: head + "pools:\n- {resourceName: rdma/ib, mode: exclusive, managementDevices: [umad, umad]}\n", wantErr: `pools[0].managementDevices[1]: "umad" is listed twice; accepted: each of umad, issm at most once`},
		{name: "unknown field", in: head + "pool: []\n", wantErr: `decode agent config: error unmarshaling JSON: while decoding JSON: json: unknown field "pool"`},
		{name: "wrong apiVersion", in: "apiVersion: v1\nkind: AgentConfig\n", wantErr: `apiVersion: "v1" is not supported; accepted: ibkube.io/v1alpha1`},
		{name: "wrong kind", in: "apiVersion: ibkube.io/v1alpha1\nkind: Config\n", wantErr: `kind: "Config" is not supported; accepted: AgentConfig`},
		{name: "empty pools", in: head + "pools: []\n", wantErr: `pools: at least one pool is required; omit the field for the defaults (rdma/shared_ib shared, rdma/ib exclusive)`},
		{name: "bad mode", in: head + "pools:\n- {resourceName: rdma/ib, mode: dedicated}\n", wantErr: `pools[0].mode: "dedicated" is not a mode; accepted: shared, exclusive`},
		{name: "bad resource name", in: head + "pools:\n- {resourceName: ib, mode: exclusive}\n", wantErr: `pools[0].resourceName: "ib" is not an extended resource name; accepted: <domain>/<name> such as rdma/ib`},
		{name: "reserved domain", in: head + "pools:\n- {resourceName: kubernetes.io/ib, mode: exclusive}\n", wantErr: `pools[0].resourceName: "kubernetes.io/ib" is in a reserved kubernetes.io domain; accepted: another domain such as rdma/ib`},
		{name: "duplicate resource", in: head + "pools:\n- {resourceName: rdma/ib, mode: exclusive}\n- {resourceName: rdma/ib, mode: shared}\n", wantErr: `pools[1].resourceName: "rdma/ib" is already used by pools[0]; accepted: a name no other pool uses`},
		{name: "slots on exclusive", in: head + "pools:\n- {resourceName: rdma/ib, mode: exclusive, slots: 4}\n", wantErr: `pools[0].slots: 4 is not allowed in mode exclusive (one device per HCA); accepted: omit slots, or mode shared`},
		{name: "too many slots", in: head + "pools:\n- {resourceName: rdma/shared_ib, mode: shared, slots: 5000}\n", wantErr: `pools[0].slots: 5000 is out of range; accepted: 1 to 1000`},
		{name: "negative slots", in: head + "pools:\n- {resourceName: rdma/shared_ib, mode: shared, slots: -1}\n", wantErr: `pools[0].slots: -1 is out of range; accepted: 1 to 1000`},
		{name: "bad link layer", in: head + "pools:\n- {resourceName: rdma/ib, mode: exclusive, selector: {linkLayers: [infiniband]}}\n", wantErr: `pools[0].selector.linkLayers[0]: "infiniband" is not a link layer; accepted: InfiniBand, Ethernet`},
		{name: "bad vendor", in: head + "pools:\n- {resourceName: rdma/ib, mode: exclusive, selector: {vendors: [\"0x15b3\"]}}\n", wantErr: `pools[0].selector.vendors[0]: "0x15b3" is not a PCI vendor ID; accepted: four lower-case hex digits without 0x, e.g. 15b3`},
		{name: "bad exclude glob", in: head + "pools:\n- {resourceName: rdma/ib, mode: exclusive, selector: {exclude: [{names: [\"mlx5_[\"]}]}}\n", wantErr: `pools[0].selector.exclude[0].names[0]: "mlx5_[" is not a valid name or glob (syntax error in pattern); accepted: a device name like mlx5_0 or a glob like mlx5_*`},
		{name: "rescan too short", in: head + "rescanPeriod: 100ms\n", wantErr: `rescanPeriod: 100ms is too short; accepted: 1s or more`},
		{name: "partition label not a key", in: head + "partitionLabelFrom: \"oci rdma block\"\n",
			wantErr: `partitionLabelFrom: "oci rdma block" is not a label key (name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')); accepted: a Node label key such as kubernetes.azure.com/agentpool`},
		{name: "rescan not a duration", in: head + "rescanPeriod: often\n", wantErr: `decode agent config: error unmarshaling JSON: while decoding JSON: time: invalid duration "often"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Parse error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("Parse (-want +got):\n%s", d)
			}
		})
	}
}

func TestDefaultIsValid(t *testing.T) {
	t.Parallel()
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(c.Pools) != 2 || c.Pools[0].ResourceName != "rdma/shared_ib" || c.Pools[0].Slots != 63 || c.Pools[1].ResourceName != "rdma/ib" {
		t.Errorf("default pools = %+v", c.Pools)
	}
	// Least privilege: no default pool hands out umad or issm.
	for _, p := range c.Pools {
		if len(p.ManagementDevices) != 0 {
			t.Errorf("default pool %s hands out %v", p.ResourceName, p.ManagementDevices)
		}
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	got, err := Load(filepath.Join(dir, "missing.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(Default(), got); d != "" {
		t.Errorf("missing file (-want +got):\n%s", d)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	if want := bad + `: apiVersion: "x" is not supported; accepted: ibkube.io/v1alpha1`; err == nil || err.Error() != want {
		t.Errorf("Load error = %v, want %q", err, want)
	}
}

func duration(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }
