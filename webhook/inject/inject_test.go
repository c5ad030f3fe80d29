package inject

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/testing/errtest"
	"github.com/ibkube/ibkube/internal/testing/golden"
	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/mutate"
)

func testOptions() Options {
	cfg := config.Default()
	cfg.ReleaseNamespace = "ibkube-system"
	return Options{Config: cfg}
}

// TestExamples injects every bundled example (the repository's examples/
// directory) and compares with golden files; injecting the output again
// must change nothing.
func TestExamples(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			warnings, err := Stream(bytes.NewReader(in), &out, testOptions())
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			var got bytes.Buffer
			for _, w := range warnings {
				got.WriteString("# warning: " + w.String() + "\n")
			}
			got.Write(out.Bytes())
			golden.Check(t, filepath.Join("testdata", "golden", name), got.Bytes())
			if !strings.Contains(out.String(), contract.AnnotationInjected) {
				t.Errorf("example was not injected")
			}
			var again bytes.Buffer
			if _, err := Stream(bytes.NewReader(out.Bytes()), &again, testOptions()); err != nil {
				t.Fatalf("second Stream: %v", err)
			}
			if diff := cmp.Diff(out.String(), again.String()); diff != "" {
				t.Errorf("injecting twice changed the output:\n%s", diff)
			}
		})
	}
}

func TestTemplates(t *testing.T) {
	t.Parallel()
	cases := map[string][]string{
		"pytorchjob-ndv5.yaml":      {"/spec/pytorchReplicaSpecs/Master/template", "/spec/pytorchReplicaSpecs/Worker/template"},
		"mpijob-nccl-tests.yaml":    {"/spec/mpiReplicaSpecs/Launcher/template", "/spec/mpiReplicaSpecs/Worker/template"},
		"jobset-oci.yaml":           {"/spec/replicatedJobs/0/template/spec/template"},
		"deployment-inference.yaml": {"/spec/template"},
		"cronjob-ib-check.yaml":     {"/spec/jobTemplate/spec/template"},
		"pod-hb-mpi.yaml":           {""},
	}
	for file, want := range cases {
		in, err := os.ReadFile(filepath.Join("..", "..", "examples", file))
		if err != nil {
			t.Fatal(err)
		}
		docs := strings.Split(string(in), "\n---\n")
		var got []string
		for _, d := range docs {
			obj := mustObject(t, d)
			got = append(got, Templates(obj)...)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", file, diff)
		}
	}
}

func TestPassThrough(t *testing.T) {
	t.Parallel()
	in := `# a comment that must survive
apiVersion: v1
kind: Service
metadata: {name: x}   # flow style kept
spec:
  ports: [{port: 80}]
---
apiVersion: v1
kind: Pod
metadata:
  name: plain
spec:
  containers: [{name: a, image: busybox}]
---
# only a comment
`
	var out bytes.Buffer
	if _, err := Stream(strings.NewReader(in), &out, testOptions()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out.String()); diff != "" {
		t.Errorf("objects without a mode changed (-in +out):\n%s", diff)
	}
}

func TestNamespaceMetadata(t *testing.T) {
	t.Parallel()
	pod := `apiVersion: v1
kind: Pod
metadata: {name: p, namespace: team}
spec:
  containers:
  - name: a
    resources: {limits: {nvidia.com/gpu: 2}}
`
	run := func(opts Options) string {
		var out bytes.Buffer
		if _, err := Stream(strings.NewReader(pod), &out, opts); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	o := testOptions()
	if got := run(o); got != pod {
		t.Errorf("pod without mode and no namespace default was changed:\n%s", got)
	}
	o.Annotations = map[string]string{contract.AnnotationMode: "rdma-exclusive"}
	if got := run(o); !strings.Contains(got, "rdma/ib: \"2\"") {
		t.Errorf("namespace default mode not applied:\n%s", got)
	}
	o.Labels = map[string]string{"team": "a"}
	if got := run(o); got != pod {
		t.Errorf("namespace without the opt-in label was injected:\n%s", got)
	}
}

// TestTemplateWithoutMetadata injects a pod template that has no metadata at
// all (a namespace default mode picks it through its GPU request): the
// annotations ibkube writes must still land on the template.
func TestTemplateWithoutMetadata(t *testing.T) {
	t.Parallel()
	in := `apiVersion: apps/v1
kind: Deployment
metadata: {name: d, namespace: team}
spec:
  template:
    spec:
      containers:
      - name: a
        resources: {limits: {nvidia.com/gpu: 1}}
`
	o := testOptions()
	o.Annotations = map[string]string{contract.AnnotationMode: contract.ModeShared}
	var out bytes.Buffer
	if _, err := Stream(strings.NewReader(in), &out, o); err != nil {
		t.Fatal(err)
	}
	obj, err := decode(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	annos, _ := nested(obj, "spec", "template", "metadata", "annotations").(map[string]any)
	for _, k := range []string{contract.AnnotationNCCLConf, contract.AnnotationMemlock, contract.AnnotationInjected} {
		if _, ok := annos[k]; !ok {
			t.Errorf("template annotations lack %s:\n%s", k, out.String())
		}
	}
}

func TestRefusal(t *testing.T) {
	t.Parallel()
	in := `apiVersion: batch/v1
kind: Job
metadata: {name: j, namespace: hpc}
spec:
  template:
    metadata:
      annotations: {infiniband.azure.com/mode: rdma-shared, infiniband.azure.com/containers: nope}
    spec:
      containers: [{name: a}]
`
	var out bytes.Buffer
	_, err := Stream(strings.NewReader("kind: ConfigMap\n---\n"+in), &out, testOptions())
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want *Error", err)
	}
	want := `document 2 (Job j) /spec/template: annotation infiniband.azure.com/containers: invalid value "nope": no container named "nope"; accepted: a comma-separated list of this pod's containers: a`
	if err.Error() != want {
		t.Errorf("error\n got %s\nwant %s", err, want)
	}
	var r *mutate.Refusal
	if !errors.As(err, &r) {
		t.Error("the webhook's *mutate.Refusal is not wrapped")
	}
}

func mustObject(t *testing.T, doc string) map[string]any {
	t.Helper()
	out, _, err := Document([]byte(doc), 1, Options{Config: config.Default(), Labels: map[string]string{}})
	if err != nil || string(out) != doc {
		t.Fatalf("Document with a non-opted-in namespace changed the input: %v", err)
	}
	obj, err := decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// TestWorkloadKinds injects one multi-document stream holding every workload
// kind the CLI promises, each with a pod template asking for rdma-shared, and
// objects that must pass through byte for byte: a ConfigMap and a Kubeflow
// TrainJob (its podTemplateOverrides are partial overrides, not pod
// templates: the webhook injects its pods at admission).
func TestWorkloadKinds(t *testing.T) {
	t.Parallel()
	const tmpl = `metadata:
  annotations: {infiniband.azure.com/mode: rdma-shared}
spec:
  containers: [{name: main, image: busybox}]
`
	indent := func(n int) string {
		pad := strings.Repeat(" ", n)
		return pad + strings.ReplaceAll(strings.TrimSuffix(tmpl, "\n"), "\n", "\n"+pad) + "\n"
	}
	cases := []struct {
		doc  string
		path string // the pod template's JSON pointer; "-" for pass-through
	}{
		{"apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {infiniband.azure.com/mode: rdma-shared}}\nspec:\n  containers: [{name: main, image: busybox}]\n", ""},
		{"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n" + indent(4), "/spec/template"},
		{"apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: s}\nspec:\n  serviceName: s\n  template:\n" + indent(4), "/spec/template"},
		{"apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: ds}\nspec:\n  template:\n" + indent(4), "/spec/template"},
		{"apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n" + indent(4), "/spec/template"},
		{"apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c}\nspec:\n  schedule: '@daily'\n  jobTemplate:\n    spec:\n      template:\n" + indent(8), "/spec/jobTemplate/spec/template"},
		{"apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: pt}\nspec:\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 2\n      template:\n" + indent(8), "/spec/pytorchReplicaSpecs/Worker/template"},
		{"apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata: {name: mpi}\nspec:\n  mpiReplicaSpecs:\n    Worker:\n      template:\n" + indent(8), "/spec/mpiReplicaSpecs/Worker/template"},
		{"apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {name: js}\nspec:\n  replicatedJobs:\n  - name: w\n    template:\n      spec:\n        template:\n" + indent(10), "/spec/replicatedJobs/0/template/spec/template"},
		{"apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\nmetadata: {name: rt}\nspec:\n  template:\n    spec:\n      replicatedJobs:\n      - name: node\n        template:\n          spec:\n            template:\n" + indent(14),
			"/spec/template/spec/replicatedJobs/0/template/spec/template"},
		{"apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: tj}\nspec:\n  runtimeRef: {name: rt}\n  podTemplateOverrides:\n  - targetJobs: [{name: node}]\n" + indent(4), "-"},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {a: b}\n", "-"},
	}
	docs := make([]string, len(cases))
	for i, c := range cases {
		docs[i] = c.doc
	}
	var out bytes.Buffer
	if _, err := Stream(strings.NewReader(strings.Join(docs, "---\n")), &out, testOptions()); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(out.String(), "---\n")
	if len(got) != len(cases) {
		t.Fatalf("%d documents out, want %d:\n%s", len(got), len(cases), out.String())
	}
	for i, c := range cases {
		obj, err := decode([]byte(got[i]))
		if err != nil {
			t.Fatal(err)
		}
		kind := obj["kind"].(string)
		if c.path == "-" {
			if got[i] != c.doc {
				t.Errorf("%s changed, want it passed through:\n%s", kind, got[i])
			}
			continue
		}
		if diff := cmp.Diff([]string{c.path}, Templates(obj)); diff != "" {
			t.Errorf("%s templates (-want +got):\n%s", kind, diff)
		}
		pod, _ := lookup(obj, c.path).(map[string]any)
		containers, _ := nested(pod, "spec", "containers").([]any)
		if len(containers) != 1 {
			t.Fatalf("%s: no container at %s/spec/containers:\n%s", kind, c.path, got[i])
		}
		if q := nested(containers[0].(map[string]any), "resources", "limits", "rdma/shared_ib"); q != "1" {
			t.Errorf("%s: container limits rdma/shared_ib = %v, want \"1\":\n%s", kind, q, got[i])
		}
		if _, ok := nested(pod, "metadata", "annotations").(map[string]any)[contract.AnnotationInjected]; !ok {
			t.Errorf("%s: no %s annotation on the template", kind, contract.AnnotationInjected)
		}
	}
}

// TestStreamGolden: separator comments kept, untouched documents byte for
// byte, integers above 2^53 digit for digit in a mutated document.
func TestStreamGolden(t *testing.T) {
	t.Parallel()
	in, err := os.ReadFile(filepath.Join("testdata", "streams", "mixed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := Stream(bytes.NewReader(in), &out, testOptions()); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "golden", "streams", "mixed.yaml"), out.Bytes())
	for _, want := range []string{
		"--- # the config map stays byte for byte, flow style and all\n",
		"metadata: {name: limits}   # kept\n",
		"--- # the pod is injected; 2^53+1 and the int64 maximum survive\n",
		"activeDeadlineSeconds: 9007199254740993\n",
		"terminationGracePeriodSeconds: 9223372036854775807\n",
		"rdma/shared_ib",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestStreamAllOrNothing: one refused document anywhere means nothing on the
// output, and every refused document is named with its index.
func TestStreamAllOrNothing(t *testing.T) {
	t.Parallel()
	refused := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  annotations: {infiniband.azure.com/mode: rdma}\nspec:\n  containers: [{name: a, image: busybox}]\n"
	good := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ok\n  annotations: {infiniband.azure.com/mode: rdma-shared}\nspec:\n  containers: [{name: a, image: busybox}]\n"
	in := strings.ReplaceAll(refused, "%s", "first") + "---\n" + good + "---\n" + strings.ReplaceAll(refused, "%s", "third")
	var out bytes.Buffer
	_, err := Stream(strings.NewReader(in), &out, testOptions())
	errtest.Names(t, err, "document 1 (Pod first)", "document 3 (Pod third)")
	if out.Len() != 0 {
		t.Errorf("%d bytes written despite refusals:\n%s", out.Len(), out.String())
	}
	if strings.Contains(err.Error(), "document 2") {
		t.Errorf("error %q names the accepted document 2", err)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Errorf("err = %v, want an *Error inside", err)
	}
}

// TestStreamCRLF: documents with CRLF line endings come back byte for byte
// when unchanged and with CRLF only when mutated.
func TestStreamCRLF(t *testing.T) {
	t.Parallel()
	crlf := func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }
	plain := crlf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}  # comment\n")
	pod := crlf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {infiniband.azure.com/mode: rdma-shared}\nspec:\n  containers: [{name: a, image: busybox}]\n")

	var out bytes.Buffer
	in := plain + crlf("--- # separator comment\n") + plain
	if _, err := Stream(strings.NewReader(in), &out, testOptions()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out.String()); diff != "" {
		t.Errorf("unchanged CRLF stream differs (-in +out):\n%s", diff)
	}

	out.Reset()
	in = plain + crlf("---\n") + pod
	if _, err := Stream(strings.NewReader(in), &out, testOptions()); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !strings.HasPrefix(got, plain+crlf("---\n")) {
		t.Errorf("the unchanged document before the mutated one changed:\n%q", got)
	}
	if !strings.Contains(got, contract.AnnotationInjected) {
		t.Errorf("pod not injected:\n%s", got)
	}
	if n := strings.Count(got, "\n") - strings.Count(got, "\r\n"); n != 0 {
		t.Errorf("%d bare LF line endings in a CRLF stream:\n%q", n, got)
	}
}
