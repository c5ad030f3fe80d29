// Package inject applies the admission webhook's mutation core to YAML
// offline: Pods, workloads with pod templates (Deployment, Job, CronJob,
// ...), custom resources whose pod templates it finds by shape (Kubeflow
// PyTorchJob/MPIJob, JobSet, ...), in multi-document streams.
package inject

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// Options says how to inject.
type Options struct {
	Config *config.Config
	// Labels and Annotations stand in for the namespace's metadata. Nil
	// Labels means an opted-in namespace (infiniband.azure.com/inject=enabled).
	Labels, Annotations map[string]string
}

// Warning is an admission warning for one pod template.
type Warning struct {
	Where, Message string
}

func (w Warning) String() string { return w.Where + ": " + w.Message }

// Error is a refusal of one pod template, with where it is.
type Error struct {
	Where   string
	Refusal *mutate.Refusal
}

func (e *Error) Error() string { return e.Where + ": " + e.Refusal.Error() }
func (e *Error) Unwrap() error { return e.Refusal }

// Stream reads YAML documents from r and writes them to w, each pod
// template mutated as the webhook would. It is all or nothing: every document
// is injected before anything is written, and if any is refused (or is not
// valid YAML) nothing reaches w and the error names every such document by
// its 1-based index (errors.Join of one error per document; a refusal is an
// *Error). Documents without a pod template to change, and the "---" lines
// between documents (with their comments), are copied byte for byte, line
// endings included; mutated documents are re-rendered (keys sorted, comments
// inside them dropped) with the line ending the document had.
func Stream(r io.Reader, w io.Writer, opts Options) ([]Warning, error) {
	in, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read input: %w", err)
	}
	var (
		out      bytes.Buffer
		warnings []Warning
		errs     []error
		n        int
	)
	for _, p := range splitDocuments(in) {
		out.Write(p.separator)
		if len(p.body) == 0 {
			continue
		}
		n++
		doc, ws, err := Document(p.body, n, opts)
		warnings = append(warnings, ws...)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out.Write(doc)
	}
	if len(errs) > 0 {
		return warnings, errors.Join(errs...)
	}
	if _, err := w.Write(out.Bytes()); err != nil {
		return warnings, fmt.Errorf("write output: %w", err)
	}
	return warnings, nil
}

// document is one document of a stream: the separator line that opened it
// (empty for the first) and its lines, both exactly as read.
type document struct {
	separator, body []byte
}

// splitDocuments cuts a YAML stream at its "---" lines. A separator is a line
// starting with "---" followed by nothing but blanks or a comment, the rule of
// k8s.io/apimachinery's YAMLReader; "--- {a: 1}" stays content, as there.
func splitDocuments(in []byte) []document {
	var docs []document
	cur := document{}
	for len(in) > 0 {
		line := in
		if i := bytes.IndexByte(in, '\n'); i >= 0 {
			line = in[:i+1]
		}
		in = in[len(line):]
		if isSeparator(line) {
			docs = append(docs, cur)
			cur = document{separator: line}
			continue
		}
		cur.body = append(cur.body, line...)
	}
	return append(docs, cur)
}

func isSeparator(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, []byte("---"))
	if !ok {
		return false
	}
	rest = bytes.TrimSpace(rest)
	return len(rest) == 0 || rest[0] == '#'
}

// Document injects one YAML document (n is its 1-based position, for messages).
func Document(doc []byte, n int, opts Options) ([]byte, []Warning, error) {
	if len(bytes.TrimSpace(stripComments(doc))) == 0 {
		return doc, nil, nil
	}
	root, err := decode(doc)
	if err != nil {
		return nil, nil, fmt.Errorf("document %d: %w", n, err)
	}
	if root == nil {
		return doc, nil, nil
	}
	kind, _ := root["kind"].(string)
	name, _ := nested(root, "metadata", "name").(string)
	object := fmt.Sprintf("document %d (%s %s)", n, kind, name)
	objNS, ns := namespaceOf(root, opts)

	var warnings []Warning
	for _, w := range mpiForwardWarnings(root) {
		warnings = append(warnings, Warning{Where: object, Message: w})
	}
	changed := false
	for _, path := range Templates(root) {
		where := object
		if path != "" {
			where += " " + path
		}
		ok, ws, err := injectTemplate(lookup(root, path).(map[string]any), objNS, ns, opts, where)
		warnings = append(warnings, ws...)
		if err != nil {
			return nil, warnings, err
		}
		changed = changed || ok
	}
	if !changed {
		return doc, warnings, nil
	}
	out, err := render(root, doc)
	if err != nil {
		return nil, warnings, fmt.Errorf("document %d: %w", n, err)
	}
	return out, warnings, nil
}

// namespaceOf is the namespace an object lands in ("default" when it names
// none) and the namespace the mutation sees: the labels and annotations the
// options give it, or opted in when they give no labels.
func namespaceOf(root map[string]any, opts Options) (string, mutate.Namespace) {
	objNS, _ := nested(root, "metadata", "namespace").(string)
	if objNS == "" {
		objNS = "default"
	}
	ns := mutate.Namespace{Name: objNS, Labels: opts.Labels, Annotations: opts.Annotations}
	if ns.Labels == nil {
		ns.Labels = map[string]string{contract.LabelInject: contract.InjectEnabled}
	}
	return objNS, ns
}

// injectTemplate mutates one pod template in place, its warnings placed at
// where; a refusal comes back as an *Error naming where.
func injectTemplate(tmpl map[string]any, objNS string, ns mutate.Namespace, opts Options, where string) (bool, []Warning, error) {
	var warnings []Warning
	ok, ws, err := mutateTemplate(tmpl, objNS, ns, opts.Config)
	for _, w := range ws {
		warnings = append(warnings, Warning{Where: where, Message: w})
	}
	if err != nil {
		var r *mutate.Refusal
		if errors.As(err, &r) {
			return false, warnings, &Error{Where: where, Refusal: r}
		}
		return false, warnings, fmt.Errorf("%s: %w", where, err)
	}
	if w := roceGIDWarning(tmpl, opts.Config.Profile); w != "" {
		warnings = append(warnings, Warning{Where: where, Message: w})
	}
	return ok, warnings, nil
}

// render writes the mutated object back as YAML, keeping the document's
// CRLF line ends when it had them.
func render(root map[string]any, doc []byte) ([]byte, error) {
	out, err := yaml.Marshal(root)
	if err != nil {
		return nil, err
	}
	if bytes.Contains(doc, []byte("\r\n")) {
		out = bytes.ReplaceAll(out, []byte("\n"), []byte("\r\n"))
	}
	return out, nil
}

// decode reads a YAML document as generic JSON; nil when it is not an object.
func decode(doc []byte) (map[string]any, error) {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, err
	}
	obj, err := unmarshalNumbers(j)
	if err != nil {
		return nil, err
	}
	root, _ := obj.(map[string]any)
	return root, nil
}

// unmarshalNumbers decodes JSON keeping numbers as json.Number, so an integer
// above 2^53 (where float64 stops being exact) is written back digit for digit.
func unmarshalNumbers(j []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(j))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// mutateTemplate runs the core on one pod (template) held as generic JSON
// and applies its patch in place; it reports whether anything changed.
func mutateTemplate(tmpl map[string]any, namespace string, ns mutate.Namespace, cfg *config.Config) (bool, []string, error) {
	raw, err := json.Marshal(tmpl)
	if err != nil {
		return false, nil, err
	}
	var pod corev1.Pod
	if err := json.Unmarshal(raw, &pod); err != nil {
		return false, nil, fmt.Errorf("not a valid pod template: %w", err)
	}
	if pod.Namespace == "" {
		pod.Namespace = namespace
	}
	res, err := mutate.Mutate(&pod, ns, cfg)
	if err != nil || len(res.Patch) == 0 {
		return false, res.Warnings, err
	}
	pb, err := json.Marshal(res.Patch)
	if err != nil {
		return false, nil, err
	}
	p, err := jsonpatch.DecodePatch(pb)
	if err != nil {
		return false, nil, fmt.Errorf("decode patch: %w", err)
	}
	// The patch is written against a pod, which always has metadata; a
	// template may leave it out, so an add creates the missing parents.
	opts := jsonpatch.NewApplyOptions()
	opts.EnsurePathExistsOnAdd = true
	patched, err := p.ApplyWithOptions(raw, opts)
	if err != nil {
		return false, nil, fmt.Errorf("apply patch: %w", err)
	}
	v, err := unmarshalNumbers(patched)
	if err != nil {
		return false, nil, err
	}
	out, _ := v.(map[string]any)
	clear(tmpl)
	for k, v := range out {
		tmpl[k] = v
	}
	return true, res.Warnings, nil
}

// Templates returns the JSON pointers of the pod templates in obj: every
// object whose spec holds a containers list (a Pod itself is at ""), not
// looking inside one once found. A Kubeflow TrainJob has none: its
// podTemplateOverrides (and runtimePatches) are partial overrides merged
// into its runtime's templates, with no resources or security context of
// their own, so the webhook handles its pods at admission instead.
func Templates(obj map[string]any) []string {
	if kind, _ := obj["kind"].(string); kind == "TrainJob" {
		if av, _ := obj["apiVersion"].(string); strings.HasPrefix(av, "trainer.kubeflow.org/") {
			return nil
		}
	}
	var out []string
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch t := v.(type) {
		case map[string]any:
			if spec, ok := t["spec"].(map[string]any); ok {
				if _, ok := spec["containers"].([]any); ok {
					out = append(out, path)
					return
				}
			}
			for _, k := range slices.Sorted(maps.Keys(t)) {
				walk(t[k], path+"/"+escape(k))
			}
		case []any:
			for i, e := range t {
				walk(e, path+"/"+strconv.Itoa(i))
			}
		}
	}
	walk(obj, "")
	return out
}

func lookup(v any, path string) any {
	if path == "" {
		return v
	}
	for _, tok := range strings.Split(path[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch t := v.(type) {
		case map[string]any:
			v = t[tok]
		case []any:
			i, _ := strconv.Atoi(tok)
			v = t[i]
		}
	}
	return v
}

// nested is the value under keys in m; nil where a key is missing or a
// value on the way is no object.
func nested(m map[string]any, keys ...string) any {
	v, _, _ := unstructured.NestedFieldNoCopy(m, keys...)
	return v
}

func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}
