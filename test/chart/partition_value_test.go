package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/inventory"
)

// TestPartitionKeyPatternIsTheAgentsForm: the contract's pattern accepts
// exactly the keys of full membership in the form the agent writes them
// (inventory.PKey's "0x%04x", sysfs's form).
func TestPartitionKeyPatternIsTheAgentsForm(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(contract.PartitionKeyPattern)
	for k := 0; k <= 0xffff; k++ {
		key := inventory.PKey(k)
		full := key&inventory.PKeyMembershipBit != 0
		if got := re.MatchString(key.String()); got != full {
			t.Fatalf("%s matches %s: %v, want %v (full membership)", contract.PartitionKeyPattern, key, got, full)
		}
	}
	for _, v := range []string{"0x800B", "800b", "0x800b0", " 0x800b", "0x800b\n", contract.PartitionRoCE} {
		if re.MatchString(v) {
			t.Errorf("%s matches %q", contract.PartitionKeyPattern, v)
		}
	}
}

// nodeLabelFormat is the node-label policy's check of the partition
// label's value, as the default render holds it.
type nodeLabelFormat struct{ expression, messageExpression string }

// readNodeLabelFormat finds the check in the default golden render (kept
// equal to helm's output by the chart-tagged tests), and ties its literals
// to the contract.
func readNodeLabelFormat(t *testing.T) nodeLabelFormat {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "defaults.golden.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil || u.GetKind() != "ValidatingAdmissionPolicy" || !strings.HasSuffix(u.GetName(), "-node-labels") {
			continue
		}
		vs, _, _ := unstructured.NestedSlice(u.Object, "spec", "validations")
		for _, v := range vs {
			m, _ := v.(map[string]any)
			expr, _ := m["expression"].(string)
			if !strings.Contains(expr, ".matches(") {
				continue
			}
			for _, lit := range []string{"'" + contract.PartitionKeyPattern + "'", "'" + contract.PartitionRoCE + "'"} {
				if !strings.Contains(expr, lit) {
					t.Errorf("the node-label policy's format check lacks the contract's %s: %s", lit, expr)
				}
			}
			msg, _ := m["messageExpression"].(string)
			return nodeLabelFormat{expression: expr, messageExpression: msg}
		}
	}
	t.Fatal("defaults.golden.yaml: no node-labels ValidatingAdmissionPolicy with a format check of the partition label")
	return nodeLabelFormat{}
}

// TestNodeLabelPolicyPartitionFormat runs the policy's format check with
// the API server's CEL environment: a node may set only a value of the
// agent's form (a full-membership key, roce, or with partitionLabelFrom the
// value of that label of the same Node), and may remove the label.
func TestNodeLabelPolicyPartitionFormat(t *testing.T) {
	t.Parallel()
	f := readNodeLabelFormat(t)
	eval := celEval(t)
	const island = "oci.oraclecloud.com/rdma.hpc_island_id"
	for _, tc := range []struct {
		value, from string // value "-": the label removed
		island      string
		ok          bool
	}{
		{value: "0x800b", ok: true},
		{value: "0xffff", ok: true},
		{value: "0x8000", ok: true},
		{value: "roce", ok: true},
		{value: "-", ok: true},
		{value: "0x7fff"},
		{value: "0x000b"},
		{value: "0x800B"},
		{value: "800b"},
		{value: "0x800b0"},
		{value: "tenant-b"},
		{value: ""},
		{value: "island-7", from: island, island: "island-7", ok: true},
		{value: "0x800b", from: island, island: "island-7", ok: true},
		{value: "island-8", from: island, island: "island-7"},
		{value: "island-7", island: "island-7"},
		{value: "", from: island},
	} {
		labels := map[string]any{"kubernetes.io/hostname": "n"}
		if tc.value != "-" {
			labels[contract.LabelPartition] = tc.value
		}
		if tc.island != "" {
			labels[island] = tc.island
		}
		vars := map[string]any{"newLabels": labels, "partitionLabel": contract.LabelPartition, "partitionFrom": tc.from}
		if got := eval(f.expression, vars); got != tc.ok {
			t.Errorf("value %q (partitionLabelFrom %q, its label %q): admitted %v, want %v", tc.value, tc.from, tc.island, got, tc.ok)
		}
		if !tc.ok {
			msg, _ := eval(f.messageExpression, vars).(string)
			if !strings.Contains(msg, "got "+tc.value) || !strings.Contains(msg, "such as 0x800b") || strings.Contains(msg, island) != (tc.from != "") {
				t.Errorf("value %q (partitionLabelFrom %q): message %s, want it to name the value and what is accepted", tc.value, tc.from, strconv.Quote(msg))
			}
		}
	}
}

// celEval compiles and runs an expression in the API server's CEL
// environment for stored expressions, with variables bound as a map.
func celEval(t *testing.T) func(expr string, vars map[string]any) any {
	t.Helper()
	env, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.StoredExpressions)
	if err != nil {
		t.Fatal(err)
	}
	env, err = env.Extend(cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)))
	if err != nil {
		t.Fatal(err)
	}
	return func(expr string, vars map[string]any) any {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("compile %s: %v", expr, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := prg.Eval(map[string]any{"variables": vars})
		if err != nil {
			t.Fatalf("eval %s: %v", expr, err)
		}
		return out.Value()
	}
}
