package charttest

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Object is one rendered manifest, decoded generically.
type Object map[string]any

// Kind is the object's kind.
func (o Object) Kind() string {
	s, _ := o["kind"].(string)
	return s
}

// Name is the object's metadata.name.
func (o Object) Name() string {
	s, _ := Field(map[string]any(o), "metadata", "name").(string)
	return s
}

// Defaults reads the golden render of the chart's default values.
func Defaults() ([]Object, error) { return Load("defaults") }

// Load reads test/chart/testdata/<name>.golden.yaml.
func Load(name string) ([]Object, error) {
	path := filepath.Join(repoRoot(), "test", "chart", "testdata", name+".golden.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Object
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		var o Object
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if o != nil {
			out = append(out, o)
		}
	}
	return out, nil
}

// Find returns the object of that kind and name.
func Find(objs []Object, kind, name string) (Object, error) {
	for _, o := range objs {
		if o.Kind() == kind && o.Name() == name {
			return o, nil
		}
	}
	return nil, fmt.Errorf("the render has no %s %s", kind, name)
}

// ContainerArgs returns the args of a workload's container.
func ContainerArgs(o Object, container string) ([]string, error) {
	cs, _ := Field(map[string]any(o), "spec", "template", "spec", "containers").([]any)
	for _, c := range cs {
		c, _ := c.(map[string]any)
		if c["name"] != container {
			continue
		}
		raw, _ := c["args"].([]any)
		args := make([]string, 0, len(raw))
		for _, a := range raw {
			s, ok := a.(string)
			if !ok {
				return nil, fmt.Errorf("%s %s container %s: arg %v is not a string", o.Kind(), o.Name(), container, a)
			}
			args = append(args, s)
		}
		return args, nil
	}
	return nil, fmt.Errorf("%s %s has no container %s", o.Kind(), o.Name(), container)
}

// Data returns a ConfigMap's data entry.
func Data(o Object, key string) (string, error) {
	s, ok := Field(map[string]any(o), "data", key).(string)
	if !ok {
		return "", fmt.Errorf("%s %s has no data %s", o.Kind(), o.Name(), key)
	}
	return s, nil
}

// Field walks nested maps; nil where a key is missing.
func Field(v any, path ...string) any {
	m, _ := v.(map[string]any)
	f, _, _ := unstructured.NestedFieldNoCopy(m, path...)
	return f
}

// repoRoot is the module root, found from this file's place in it.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// FlagMismatches holds a binary's command line against the args the chart
// passes it: every arg must name a flag the binary defines, and carry the
// flag's own default unless it is in deployment (flags the chart sets on
// purpose, such as host paths as mounted in the pod), which must then differ
// from the default (else the entry is stale). newFlags returns a fresh flag
// set each call. It returns one line per mismatch.
func FlagMismatches(newFlags func() *flag.FlagSet, args []string, deployment map[string]bool) []string {
	var out []string
	for _, a := range args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !strings.HasPrefix(a, "--") {
			out = append(out, fmt.Sprintf("arg %q: want --name=value", a))
			continue
		}
		fs := newFlags()
		f := fs.Lookup(name)
		if f == nil {
			out = append(out, fmt.Sprintf("--%s: the chart passes it, the binary defines no such flag", name))
			continue
		}
		if err := fs.Set(name, value); err != nil {
			out = append(out, fmt.Sprintf("--%s=%s: the binary refuses it: %v", name, value, err))
			continue
		}
		got := f.Value.String()
		switch {
		case deployment[name] && got == f.DefValue:
			out = append(out, fmt.Sprintf("--%s: the chart passes the default %q; it is no deployment choice any more", name, got))
		case !deployment[name] && got != f.DefValue:
			out = append(out, fmt.Sprintf("--%s: the chart passes %q, the binary's default is %q", name, got, f.DefValue))
		}
	}
	return out
}

// CheckDefaultFlags fails t with every FlagMismatches line between the args
// the default render passes the container of the workload (kind, name) and
// the flags newFlags declares.
func CheckDefaultFlags(t testing.TB, kind, name, container string, newFlags func() *flag.FlagSet, deployment map[string]bool) {
	t.Helper()
	objs, err := Defaults()
	if err != nil {
		t.Fatal(err)
	}
	o, err := Find(objs, kind, name)
	if err != nil {
		t.Fatal(err)
	}
	args, err := ContainerArgs(o, container)
	if err != nil {
		t.Fatal(err)
	}
	if bad := FlagMismatches(newFlags, args, deployment); len(bad) > 0 {
		t.Errorf("the chart's %s args and the %s's flags disagree:\n%s", container, container, strings.Join(bad, "\n"))
	}
}
