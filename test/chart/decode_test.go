//go:build chart || integration

package chart

import (
	"errors"
	"io"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
)

var unstructuredStringMap = unstructured.NestedStringMap

// decodeAll splits a multi-document YAML stream into objects.
func decodeAll(t *testing.T, stream string) []*unstructured.Unstructured {
	t.Helper()
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(stream), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decode rendered YAML: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}
