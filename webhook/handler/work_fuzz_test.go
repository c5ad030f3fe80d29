package handler

import (
	"encoding/json"
	"testing"
)

// FuzzElementCount checks the raw count of a JSON array's elements against
// the decoder's own: a miscount would let a pod past the container bound
// into a full decode (where the core counts again).
func FuzzElementCount(f *testing.F) {
	for _, s := range []string{`[]`, `[{}]`, `[{},{"a":[1,2,{"b":"],"}]}]`, `["\"",",",[]]`, `[ 1 , 2 ,3 ]`, `[[[]],[{}],"x\\"]`, `null`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var elems []json.RawMessage
		if err := json.Unmarshal([]byte(s), &elems); err != nil {
			return // not an array: the decoder refuses it before counting
		}
		var shape struct {
			L elementCount `json:"l"`
		}
		doc := `{"l":` + s + `}`
		if err := json.Unmarshal([]byte(doc), &shape); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if int(shape.L) != len(elems) {
			t.Fatalf("%s: counted %d elements, the decoder finds %d", s, shape.L, len(elems))
		}
	})
}

// FuzzCountValues checks the raw count of a document's JSON values, which
// bounds the work of decoding a review, against the decoder's own: an
// undercount would let a pod past the bound into a full decode.
func FuzzCountValues(f *testing.F) {
	for _, s := range []string{`1`, `[]`, `{}`, `{"a":[1,{"b":"],\"{"}],"c":null}`, `["\\",",",[[]],{}]`, ` { "a" : [ 1 , 2 ] } `} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			return // not JSON: the decoder refuses it before counting
		}
		if got, want := countValues([]byte(s)), decodedValues(v); got != want {
			t.Fatalf("%s: counted %d values, the decoder finds %d", s, got, want)
		}
	})
}

func decodedValues(v any) int {
	n := 1
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			n += decodedValues(e)
		}
	case map[string]any:
		for _, e := range v {
			n += decodedValues(e)
		}
	}
	return n
}
