package config

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/nccl"
)

func TestDefaultIsValid(t *testing.T) {
	t.Parallel()
	c := Default()
	if err := c.validate(); err != nil {
		t.Fatalf("Default() invalid: %v", err)
	}
	if diff := cmp.Diff(builtinNames(), c.ProfileNames()); diff != "" {
		t.Errorf("profiles (-want +got):\n%s", diff)
	}
	// The aligned claim needs DRA on every GPU node, so a cluster opts in.
	if want := (AlignedClaims{GPUDeviceClass: contract.DefaultGPUDeviceClass}); c.AlignedClaims != want {
		t.Errorf("AlignedClaims = %+v, want %+v", c.AlignedClaims, want)
	}
}

// builtinNames are the built-in profiles' names, sorted: every profile of a
// config without profiles of its own.
func builtinNames() []string {
	var names []string
	for _, p := range nccl.Builtin() {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return names
}

func TestParseMinimal(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("apiVersion: ibkube.io/v1alpha1\nkind: WebhookConfig\n"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Default(), c, cmp.AllowUnexported(Config{})); diff != "" {
		t.Errorf("minimal file differs from Default (-want +got):\n%s", diff)
	}
}

func TestParseFull(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("testdata", "full.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if c.Resources.Shared != "rdma/rdma_shared_device_a" || c.DefaultHCAs != 2 || c.IPoIBNamespace() != "network-operator" ||
		c.Memlock != "64Gi" || c.CapabilityPolicy != CapabilityAlways || c.DefaultProfile != "site-ndv5" ||
		c.AlignedClaims != (AlignedClaims{Enabled: true, GPUDeviceClass: "gpu.amd.com"}) {
		t.Errorf("fields not read: %+v", c)
	}
	nd, _ := c.Profile("ndv5")
	// The site's NCCL_NET_GDR_LEVEL replaces the built-in one for every pod
	// (no longer whole-node only) and carries no public source.
	builtin, _ := Default().Profile("ndv5")
	wantND := []nccl.Var{builtin.NCCL[0], builtin.NCCL[1], {Name: "NCCL_NET_GDR_LEVEL", Value: "PHB"}}
	if diff := cmp.Diff(wantND, nd.NCCL); diff != "" {
		t.Errorf("override of built-in ndv5 (-want +got):\n%s", diff)
	}
	site, ok := c.Profile("site-ndv5")
	if !ok {
		t.Fatal("site-ndv5 missing")
	}
	wantSite := nccl.Profile{
		Name:         "site-ndv5",
		Description:  "ND H100 v5 with our SHARP plugin",
		NCCL:         append(wantND, nccl.Var{Name: "NCCL_COLLNET_ENABLE", Value: "1"}),
		Env:          []nccl.Var{builtin.Env[0], {Name: "SHARP_COLL_LOG_LEVEL", Value: "3"}},
		TopologyFile: "ndv5-topo.xml",
		GPUsPerNode:  8,
	}
	if diff := cmp.Diff(wantSite, site); diff != "" {
		t.Errorf("site-ndv5 (-want +got):\n%s", diff)
	}
	roce, _ := c.Profile("site-roce")
	wantRoCE := nccl.Profile{
		Name:        "site-roce",
		Description: "a RoCE cluster of our own",
		NCCL: []nccl.Var{
			{Name: "NCCL_IB_TC", Value: "106"},
			{Name: "NCCL_NET_GDR_LEVEL", Value: "SYS", WholeNode: true},
		},
		GPUsPerNode:       8,
		HCAsPerGPU:        2,
		ExclusiveResource: "rdma/roce_site",
		GPUResource:       "amd.com/gpu",
	}
	if diff := cmp.Diff(wantRoCE, roce); diff != "" {
		t.Errorf("site-roce (-want +got):\n%s", diff)
	}
	// Built-ins stay untouched for other configs.
	if d, _ := Default().Profile("ndv5"); d.NCCL[2].Value != "SYS" || !d.NCCL[2].WholeNode {
		t.Errorf("override leaked into the built-in catalogue: %v", d.NCCL)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	const head = "apiVersion: ibkube.io/v1alpha1\nkind: WebhookConfig\n"
	cases := []struct {
		name, file string
		want       []string // substrings of the error, in order
	}{
		{"empty", "", []string{"config is empty"}},
		{"unknown field", head + "resource:\n  shared: rdma/x\n", []string{`unknown field "resource"`}},
		{"unknown nested field", head + "ipoib:\n  nam: x\n", []string{`unknown field "ipoib.nam"`}},
		{"wrong kind", "apiVersion: ibkube.io/v1alpha1\nkind: AgentConfig\n", []string{`kind: invalid value "AgentConfig": want WebhookConfig`}},
		{"wrong version", "apiVersion: ibkube.io/v1\nkind: WebhookConfig\n", []string{`apiVersion: invalid value "ibkube.io/v1": want ibkube.io/v1alpha1`}},
		{"bad resource", head + "resources:\n  shared: shared_ib\n", []string{`resources.shared: invalid value "shared_ib": want an extended resource name such as rdma/shared_ib (domain/name)`}},
		{"same resources", head + "resources:\n  shared: rdma/ib\n", []string{`resources.exclusive: invalid value "rdma/ib": must differ from resources.shared`}},
		{"bad policy", head + "capabilityPolicy: sometimes\n", []string{`capabilityPolicy: invalid value "sometimes": want auto, always or never`}},
		{"bad memlock", head + "memlock: infinite\n", []string{`memlock: invalid value "infinite": not a quantity; want "unlimited" or a positive whole number of bytes as a Kubernetes quantity such as "64Gi"`}},
		// The node agent refuses these, so the webhook must not admit them.
		{"fractional memlock", head + "memlock: 100m\n", []string{`memlock: invalid value "100m": not a whole number of bytes; want "unlimited" or a positive whole number of bytes as a Kubernetes quantity such as "64Gi"`}},
		{"huge memlock", head + "memlock: \"1e99\"\n", []string{`memlock: invalid value "1e99": too large (below 8Ei); want "unlimited"`}},
		{"8Ei memlock", head + "memlock: 8Ei\n", []string{`memlock: invalid value "8Ei": too large (below 8Ei)`}},
		{"zero memlock", head + "memlock: \"0\"\n", []string{`memlock: invalid value "0": not positive; want "unlimited"`}},
		{"bad hcas", head + "defaultHCAs: 0\n", []string{fmt.Sprintf(`defaultHCAs: invalid value "0": want an integer from 1 to %d`, MaxHCAs)}},
		{"bad network", head + "ipoib:\n  name: IB_Net\n", []string{`ipoib.name: invalid value "IB_Net"`}},
		{"unknown default profile", head + "defaultProfile: ndv9\n", []string{`defaultProfile: invalid value "ndv9": want one of ` + strings.Join(builtinNames(), ", ")}},
		{"whole-node var also under nccl", head + "profiles:\n- name: x\n  nccl:\n    NCCL_A: \"1\"\n  wholeNodeNCCL:\n    NCCL_A: \"2\"\n", []string{`profiles[0].wholeNodeNCCL: invalid value "NCCL_A": also under nccl`}},
		{"non-nccl whole-node var", head + "profiles:\n- name: x\n  wholeNodeNCCL:\n    UCX_TLS: rc\n", []string{`profiles[0].wholeNodeNCCL: invalid value "UCX_TLS": keys must be NCCL_* variable names`}},
		{"negative hcasPerGPU", head + "profiles:\n- name: x\n  hcasPerGPU: -2\n", []string{`profiles[0].hcasPerGPU: invalid value "-2": want an integer from 0 (meaning 1) to 64`}},
		{"huge gpusPerNode", head + "profiles:\n- name: x\n  gpusPerNode: 1000\n", []string{`profiles[0].gpusPerNode: invalid value "1000": want an integer from 0 (unknown) to 64`}},
		{"bad exclusiveResource", head + "profiles:\n- name: x\n  exclusiveResource: roce\n", []string{`profiles[0].exclusiveResource: invalid value "roce": want an extended resource name such as rdma/roce (domain/name)`}},
		{"exclusiveResource is the shared one", head + "profiles:\n- name: x\n  exclusiveResource: rdma/shared_ib\n", []string{`profiles[0].exclusiveResource: invalid value "rdma/shared_ib": must differ from resources.shared`}},
		{"nccl var in env", head + "profiles:\n- name: x\n  env:\n    NCCL_DEBUG: INFO\n", []string{`profiles[0].env: invalid value "NCCL_DEBUG": NCCL_* variables go under nccl`}},
		{"non-nccl in nccl", head + "profiles:\n- name: x\n  nccl:\n    UCX_TLS: rc\n", []string{`profiles[0].nccl: invalid value "UCX_TLS": keys must be NCCL_* variable names`}},
		{"multi-line value", head + "profiles:\n- name: x\n  nccl:\n    NCCL_X: \"a\\nb\"\n", []string{`profiles[0].nccl.NCCL_X: invalid value "a\nb": want a single line`}},
		{"unknown base", head + "profiles:\n- name: x\n  base: z\n", []string{`profiles[0].base: invalid value "z": want one of`}},
		{"removed topologyFile", head + "profiles:\n- name: x\n  base: ndv5\n  topologyFile: my-topo.xml\n", []string{`profiles[0].topologyFile: invalid value "my-topo.xml": no longer accepted: the node agent mounts the NCCL topology file`}},
		{"duplicate profile", head + "profiles:\n- name: x\n- name: x\n", []string{`profiles[1].name: invalid value "x": profile defined twice`}},
		{"bad gpuDeviceClass", head + "alignedClaims:\n  enabled: true\n  gpuDeviceClass: GPU_Nvidia\n", []string{`alignedClaims.gpuDeviceClass: invalid value "GPU_Nvidia": want the GPU driver's DeviceClass name (a DNS-1123 subdomain such as gpu.nvidia.com)`}},
		{"empty gpuDeviceClass", head + "alignedClaims:\n  gpuDeviceClass: \"\"\n", []string{`alignedClaims.gpuDeviceClass: invalid value "": want the GPU driver's DeviceClass name`}},
		{"enabled not a bool", head + "alignedClaims:\n  enabled: \"yes\"\n", []string{`alignedClaims.enabled`}},
		{"unknown alignedClaims field", head + "alignedClaims:\n  gpuClass: gpu.nvidia.com\n", []string{`unknown field "alignedClaims.gpuClass"`}},
		{"several errors at once", head + "memlock: lots\ncapabilityPolicy: some\n", []string{`memlock: invalid value "lots"`, `capabilityPolicy: invalid value "some"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.file))
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			msg := err.Error()
			for _, w := range tc.want {
				i := strings.Index(msg, w)
				if i < 0 {
					t.Fatalf("error %q\nmissing %q", msg, w)
				}
				msg = msg[i+len(w):]
			}
		})
	}
}

// TestChartSchemaKnowsProfileFields ties the chart's values schema, which
// refuses unknown profile fields, to the fields a profile has here: a field
// missing from the schema could not be set through the chart.
func TestChartSchemaKnowsProfileFields(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "..", "charts", "ibkube", "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Webhook struct {
				Properties struct {
					Config struct {
						Properties struct {
							Profiles struct {
								Items struct {
									Properties map[string]json.RawMessage `json:"properties"`
								} `json:"items"`
							} `json:"profiles"`
						} `json:"properties"`
					} `json:"config"`
				} `json:"properties"`
			} `json:"webhook"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range schema.Properties.Webhook.Properties.Config.Properties.Profiles.Items.Properties {
		got = append(got, k)
	}
	var want []string
	rt := reflect.TypeOf(ProfileSpec{})
	for i := 0; i < rt.NumField(); i++ {
		if strings.HasPrefix(rt.Field(i).Name, "Removed") {
			continue // read only to be refused; the schema refuses it too
		}
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		want = append(want, name)
	}
	sort.Strings(got)
	sort.Strings(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("chart schema webhook.config.profiles[] fields (-ProfileSpec +schema):\n%s", diff)
	}
}
