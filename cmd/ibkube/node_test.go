package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/internal/testing/golden"
)

func TestRunNodeGolden(t *testing.T) {
	t.Parallel()
	names := fixture.Names()
	if len(names) < 5 {
		t.Fatalf("fixtures = %v, want at least ndv5, ndv4, hb, oci-h100, broken", names)
	}
	type nodeCase struct{ name, fixture, config string }
	var cases []nodeCase
	for _, n := range names {
		cases = append(cases, nodeCase{n, n, ""})
	}
	// RoCE needs a config: the default pools take InfiniBand only.
	cases = append(cases, nodeCase{"oci-h100-roce", "oci-h100", filepath.Join("testdata", "node", "oci-h100-roce.yaml")})
	for _, tc := range cases {
		for _, format := range []string{"json", "table", "slices"} {
			t.Run(tc.name+"/"+format, func(t *testing.T) {
				t.Parallel()
				dir := fixture.BuildTemp(t, tc.fixture)
				cfg := tc.config
				if cfg == "" {
					cfg = filepath.Join(dir, "none.yaml")
				}
				var out, errb bytes.Buffer
				args := []string{"--sysfs-root", fixture.SysfsRoot(dir), "--dev-root", fixture.DevRoot(dir),
					"--config", cfg, "-o", format, "--node-name", "node-0"}
				if err := runNode(context.Background(), args, stdio{out: &out, err: &errb}); err != nil {
					t.Fatalf("runNode: %v (%s)", err, errb.String())
				}
				ext := map[string]string{"json": ".json", "table": ".txt", "slices": ".slices.yaml"}[format]
				golden.Check(t, filepath.Join("testdata", "node", tc.name+ext), out.Bytes())
			})
		}
	}
}

// TestRunNodeExcludesEthernet checks what users rely on: on ND H100 v5 the
// Ethernet mlx5 device feeds no resource and the reason names the selector.
func TestRunNodeExcludesEthernet(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, "ndv5")
	var out bytes.Buffer
	err := runNode(context.Background(), []string{"--sysfs-root", fixture.SysfsRoot(dir), "--dev-root", fixture.DevRoot(dir),
		"--config", filepath.Join(dir, "none.yaml"), "-o", "json"}, stdio{out: &out, err: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	var hcas []struct {
		Name, LinkLayer, Resource, Reason string
	}
	if err := json.Unmarshal(out.Bytes(), &hcas); err != nil {
		t.Fatal(err)
	}
	var ib, excluded int
	for _, h := range hcas {
		switch {
		case h.LinkLayer == "InfiniBand" && h.Resource == "rdma/shared_ib,rdma/ib":
			ib++
		case h.LinkLayer == "Ethernet" && h.Resource == "" && strings.Contains(h.Reason, "selector.linkLayers [InfiniBand] does not match Ethernet"):
			excluded++
		default:
			t.Errorf("unexpected HCA %+v", h)
		}
	}
	if ib != 8 || excluded != 1 {
		t.Errorf("IB HCAs in both pools = %d, excluded Ethernet = %d; want 8 and 1", ib, excluded)
	}
}

func TestRunNodeErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "apiVersion: ibkube.io/v1alpha1\nkind: AgentConfig\npools:\n- {resourceName: rdma/ib, mode: both}\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", "yaml"}, `node: -o "yaml": accepted: table, json, slices`},
		{[]string{"--config", "none.yaml", "-o", "slices", "--node-name", "Node_0"}, `node: --node-name "Node_0": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'); want a Kubernetes node name`},
		{[]string{"--config", bad}, `node: ` + bad + `: pools[0].mode: "both" is not a mode; accepted: shared, exclusive`},
		{[]string{"extra"}, `node: unexpected arguments ["extra"]: ibkube node takes flags only`},
		// A root that cannot list RDMA devices is an error, not "no HCAs".
		{[]string{"--config", "none.yaml", "--sysfs-root", filepath.Join(dir, "missing")}, `node: sysfs root ` + filepath.Join(dir, "missing") + ` does not exist; accepted: /sys, or a directory laid out like it`},
		{[]string{"--config", "none.yaml", "--sysfs-root", dir}, `node: no ` + filepath.Join(dir, "class", "infiniband") + `: the RDMA core is not loaded (modprobe mlx5_ib, or install the NIC driver), or ` + dir + ` is not a sysfs tree`},
	} {
		err := runNode(context.Background(), tc.args, stdio{out: &bytes.Buffer{}, err: &bytes.Buffer{}})
		if err == nil || err.Error() != tc.want {
			t.Errorf("runNode(%q) = %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestRunNodeJSONFields pins the JSON field names docs/node-agent.md
// promises to scripts (exact case: encoding/json would match "Name" to "name" on
// decoding, and a golden rewritten with -update would bless a rename).
func TestRunNodeJSONFields(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, fixture.Broken)
	var out bytes.Buffer
	if err := runNode(context.Background(), []string{"--sysfs-root", fixture.SysfsRoot(dir), "--dev-root", fixture.DevRoot(dir),
		"--config", filepath.Join(dir, "none.yaml"), "-o", "json"}, stdio{out: &out, err: &bytes.Buffer{}}); err != nil {
		t.Fatal(err)
	}
	var hcas []map[string]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &hcas); err != nil || len(hcas) == 0 {
		t.Fatalf("ibkube node -o json: %v\n%s", err, out.String())
	}
	for _, h := range hcas {
		for _, k := range []string{"name", "pciAddress", "numaNode", "linkLayer", "healthy", "reason", "resource", "ports", "charDevices", "counters"} {
			if _, ok := h[k]; !ok {
				t.Errorf("HCA %s lacks %q", h["name"], k)
			}
		}
		var ports []map[string]json.RawMessage
		if err := json.Unmarshal(h["ports"], &ports); err != nil || len(ports) == 0 {
			t.Fatalf("HCA %s ports: %v", h["name"], err)
		}
		for _, p := range ports {
			for _, k := range []string{"port", "state", "physState", "netdev"} {
				if _, ok := p[k]; !ok {
					t.Errorf("HCA %s port lacks %q", h["name"], k)
				}
			}
		}
	}
	// The down port's error counters reach the JSON under their sysfs names.
	var cs []struct {
		Port     int               `json:"port"`
		Counters map[string]uint64 `json:"counters"`
	}
	if err := json.Unmarshal(hcas[1]["counters"], &cs); err != nil || len(cs) != 1 {
		t.Fatalf("broken node's mlx5_1 counters: %v %s", err, hcas[1]["counters"])
	}
	if cs[0].Port != 1 || cs[0].Counters["link_downed"] != 3 || cs[0].Counters["symbol_error"] != 17 {
		t.Errorf("broken node's mlx5_1 counters = %+v, want port 1 with link_downed 3, symbol_error 17", cs[0])
	}
	// numaNode -1 stays -1 (unknown), not 0.
	if got := string(hcas[3]["numaNode"]); got != "-1" {
		t.Errorf("broken node's mlx5_3 numaNode = %s, want -1", got)
	}
}

// TestRunNodeHostileTree: names from the tree reach the table quoted, with
// no escape character, and the HCAs that cannot be read are listed with the
// cause rather than dropped or explained by a selector.
func TestRunNodeHostileTree(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, fixture.HB)
	ib := filepath.Join(fixture.SysfsRoot(dir), "class", "infiniband")
	for name, target := range map[string]string{
		"mlx5_\x1b[2J\x1b[31m": "mlx5_0", // clears the screen if printed raw
		"mlx5_8":               "mlx5_8", // loops
		"mlx5_9":               "../../devices/gone/infiniband/mlx5_9",
	} {
		if err := os.Symlink(target, filepath.Join(ib, name)); err != nil {
			t.Fatal(err)
		}
	}
	vendor := filepath.Join(ib, "mlx5_0", "device", "vendor")
	if err := os.Remove(vendor); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", vendor); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- runNode(context.Background(), []string{"--sysfs-root", fixture.SysfsRoot(dir), "--dev-root", fixture.DevRoot(dir),
			"--config", filepath.Join(dir, "none.yaml")}, stdio{out: &out, err: &bytes.Buffer{}})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ibkube node did not finish within 10s")
	}
	table := out.String()
	if strings.ContainsRune(table, 0x1b) {
		t.Fatalf("an escape character reached the table:\n%q", table)
	}
	for _, want := range []string{
		`"mlx5_\x1b[2J\x1b[31m"`,
		"mlx5_8 ", "sysfs entry class/infiniband/mlx5_8 unusable: too many levels of symbolic links",
		"mlx5_9 ", "sysfs entry class/infiniband/mlx5_9 unusable: dangling symlink",
		"cannot read device/vendor: not a regular file (a char device); excluded: rdma/shared_ib: pools[0].selector.vendors [15b3] does not match",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

// TestRunNodeSlicesAreTheAgents: `ibkube node -o slices` prints, object for
// object, what the DRA agent's code makes of the same tree (node/dra's
// Resources, as the driver hands it to the slice controller), decodable as
// resource.k8s.io/v1 ResourceSlices.
func TestRunNodeSlicesAreTheAgents(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, fixture.NDv5)
	var out bytes.Buffer
	if err := runNode(context.Background(), []string{"--sysfs-root", fixture.SysfsRoot(dir), "--dev-root", fixture.DevRoot(dir),
		"--config", filepath.Join(dir, "none.yaml"), "-o", "slices", "--node-name", "nd-7"}, stdio{out: &out, err: &bytes.Buffer{}}); err != nil {
		t.Fatal(err)
	}
	var got []resourceapi.ResourceSlice
	for _, doc := range strings.Split(out.String(), "---\n")[1:] {
		var s resourceapi.ResourceSlice
		if err := sigsyaml.UnmarshalStrict([]byte(doc), &s); err != nil {
			t.Fatalf("decode %q: %v", doc, err)
		}
		got = append(got, s)
	}
	if len(got) != 2 || got[0].Kind != "ResourceSlice" || got[0].APIVersion != "resource.k8s.io/v1" {
		t.Fatalf("%d slices %+v, want a counters slice and a devices slice of resource.k8s.io/v1", len(got), got)
	}
	var devices, counters int
	for _, s := range got {
		if s.Spec.Driver != contract.DRADriverName || s.Spec.Pool.Name != "nd-7" || s.Spec.NodeName == nil || *s.Spec.NodeName != "nd-7" || s.Spec.Pool.ResourceSliceCount != 2 {
			t.Errorf("slice %s: driver %s, pool %+v, node %v", s.GenerateName, s.Spec.Driver, s.Spec.Pool, s.Spec.NodeName)
		}
		devices += len(s.Spec.Devices)
		for _, cs := range s.Spec.SharedCounters {
			counters += len(cs.Counters)
		}
	}
	if devices != 16 || counters != 8 {
		t.Errorf("%d devices and %d counters, want 16 and 8 (one per HCA)", devices, counters)
	}
	i := slices.IndexFunc(got[1].Spec.Devices, func(d resourceapi.Device) bool { return d.Name == "ib-mlx5-7" })
	if i < 0 {
		t.Fatalf("no device ib-mlx5-7 in %+v", got[1].Spec.Devices)
	}
	if root := got[1].Spec.Devices[i].Attributes["resource.kubernetes.io/pcieRoot"]; root.StringValue == nil || *root.StringValue != "pci0108:00" {
		t.Errorf("ib-mlx5-7 pcieRoot %v, want pci0108:00 read from the tree", root)
	}
}
