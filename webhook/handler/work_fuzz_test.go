package handler

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
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
// bounds the work of decoding a review, against the decoder's own token
// stream: an undercount would let a pod past the bound into a full decode.
// A member whose key repeats counts each time: encoding/json decodes every
// one, though a map keeps only the last.
func FuzzCountValues(f *testing.F) {
	for _, s := range []string{`1`, `[]`, `{}`, `{"a":[1,{"b":"],\"{"}],"c":null}`, `["\\",",",[[]],{}]`, ` { "a" : [ 1 , 2 ] } `, `{"":[],"":null}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !json.Valid([]byte(s)) {
			return // not JSON: the decoder refuses it before counting
		}
		if got, want := countValues([]byte(s)), tokenValues(t, s); got != want {
			t.Fatalf("%s: counted %d values, the decoder reads %d", s, got, want)
		}
	})
}

// tokenValues counts the values json.Decoder reads from s: every scalar,
// list and object that is not an object's key.
func tokenValues(t *testing.T, s string) int {
	t.Helper()
	type frame struct{ object, wantKey bool }
	var stack []frame
	dec := json.NewDecoder(strings.NewReader(s))
	n := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		d, delim := tok.(json.Delim)
		if delim && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			continue
		}
		if len(stack) > 0 && stack[len(stack)-1].object {
			top := &stack[len(stack)-1]
			top.wantKey = !top.wantKey
			if !top.wantKey {
				continue // the key of the member whose value comes next
			}
		}
		n++
		if delim {
			stack = append(stack, frame{object: d == '{', wantKey: true})
		}
	}
}
