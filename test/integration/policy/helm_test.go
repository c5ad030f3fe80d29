//go:build chart || integration

// Package policy tests admission.mode policy: the chart's policies against
// the Go renderer (webhook/policy) for the same values, and, with the
// integration tag, the shipped policies in a real kube-apiserver (envtest)
// admitting webhook/mutate's whole corpus exactly as the Go core does.
//
// The helm binary comes from $HELM and the API server from
// $KUBEBUILDER_ASSETS (make test-integration-policy sets both).
package policy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/ibkube/ibkube/internal/testing/charttest"
)

const (
	release   = "ibkube"
	namespace = "ibkube-system"
)

// helmTemplate renders the chart as make manifests does, with extra args.
func helmTemplate(t testing.TB, extra ...string) string {
	t.Helper()
	out, err := helmTemplateErr(t, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// helmTemplateErr is helmTemplate returning helm's failure.
func helmTemplateErr(t testing.TB, extra ...string) (string, error) {
	t.Helper()
	args := append([]string{"template", release, charttest.ChartDir(), "--namespace", namespace, "--kube-version", "1.37.2"}, extra...)
	out, err := charttest.Helm(t, "test-integration-policy", args...)
	if err != nil {
		return "", err
	}
	return out, nil
}

// chartAppVersion is the chart's appVersion, which the chart writes as the
// version in the injected annotation.
func chartAppVersion(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(charttest.ChartDir(), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c.AppVersion
}

// decode splits a rendered stream into objects keyed by kind/name.
func decode(t testing.TB, stream string) map[string]*unstructured.Unstructured {
	t.Helper()
	out := map[string]*unstructured.Unstructured{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(stream)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatal(err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		out[u.GetKind()+"/"+u.GetName()] = u
	}
}

func key(kind, name string) string { return fmt.Sprintf("%s/%s", kind, name) }
