package handler

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	kjson "sigs.k8s.io/json"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/webhook/multus"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// MaxReviewValues bounds the JSON values (objects, arrays, strings,
// numbers, literals) of a review whose pod the handler decodes. Decoding
// costs memory per value, not per byte: a forged 3.9 MB review of 1.3
// million empty volumes ("{}", three bytes each) became 1.3 million
// corev1.Volume structs, hundreds of MiB. A pod ibkube admits holds at most
// this many; docs/webhook-operations.md has the cost measured at the bound.
const MaxReviewValues = 8192

// maxOtherOwnKeys bounds how many unknown keys under contract.Prefix the
// head keeps: relevance needs one; the core reads them all again from the
// decoded pod.
const maxOtherOwnKeys = 8

// podHead is what the handler reads of a pod before it knows whether ibkube
// looks at it: its names, ibkube's own annotations and how many there are
// in all (annotationHead) and how many containers of each kind it holds
// (elementCount). The
// decoder skips everything else without building it, so a pod that is not
// ibkube's costs a pass over its bytes whatever it holds.
type podHead struct {
	Metadata struct {
		Name         string         `json:"name"`
		GenerateName string         `json:"generateName"`
		Namespace    string         `json:"namespace"`
		Annotations  annotationHead `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Containers          elementCount `json:"containers"`
		InitContainers      elementCount `json:"initContainers"`
		EphemeralContainers elementCount `json:"ephemeralContainers"`
	} `json:"spec"`
}

func readHead(object []byte) (*podHead, error) {
	var h podHead
	if err := kjson.UnmarshalCaseSensitivePreserveInts(object, &h); err != nil {
		return nil, fmt.Errorf("decode pod: %w", err)
	}
	return &h, nil
}

// workRefusal is the refusal of a pod ibkube looks at that would cost more
// than its bounds, or "" within them; values counts the whole review.
func workRefusal(h *podHead, values int) string {
	s := h.Spec
	if err := mutate.ContainerCountRefusal(int(s.Containers + s.InitContainers + s.EphemeralContainers)); err != nil {
		return err.Error()
	}
	if values > MaxReviewValues {
		return fmt.Sprintf("pod's admission review holds %d JSON values (every object, list, string and number of the pod: "+
			"containers, volumes, tolerations, env, volume mounts, annotations and their fields); accepted: at most %d in a pod ibkube admits",
			values, MaxReviewValues)
	}
	return ""
}

// annotationHead is what relevance needs of a pod's annotations
// (mutate.Relevant): the keys under contract.Prefix with their values
// (every known one, at most maxOtherOwnKeys others), whether the Multus
// networks key is there (ibkube writes it, so it is not counted against
// mutate.MaxAnnotations), and how many members the object has. Any other
// annotation is counted without being copied.
type annotationHead struct {
	own      map[string]string
	networks bool
	count    int
}

func (a *annotationHead) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) == 0 || b[0] != '{' {
		return fmt.Errorf("annotations: want an object, got %.20q", b)
	}
	return eachMember(b, func(key, value []byte) error {
		a.count++
		k, err := ownKey(key)
		if err != nil || k == "" {
			return err
		}
		if k == multus.Annotation {
			a.networks = true
			return nil
		}
		if _, seen := a.own[k]; !seen && !contract.KnownKey(strings.TrimPrefix(k, contract.Prefix)) && len(a.own) >= len(contract.KnownKeys())+maxOtherOwnKeys {
			return nil
		}
		var v string
		if err := kjson.UnmarshalCaseSensitivePreserveInts(value, &v); err != nil {
			return fmt.Errorf("annotation %s: %w", clip(k), err)
		}
		if a.own == nil {
			a.own = map[string]string{}
		}
		a.own[k] = v
		return nil
	})
}

// relevant is mutate.Relevant of the whole annotations object, asked of
// a stand-in that holds the same keys under contract.Prefix, the networks
// key if there is one, and in place of the others as many placeholder keys
// (no annotation key can hold a NUL), at most mutate.MaxAnnotations+1 of
// them: the core's rule reads only these keys and how many annotations
// there are, up to its bound. (A forged object that repeats a key counts it
// twice; the API server never sends one.)
func (a *annotationHead) relevant(ns mutate.Namespace) bool {
	others := a.count - len(a.own)
	if a.networks {
		others--
	}
	stand := make(map[string]string, len(a.own)+min(others, mutate.MaxAnnotations+1)+1)
	for k, v := range a.own {
		stand[k] = v
	}
	if a.networks {
		stand[multus.Annotation] = ""
	}
	for i := range min(others, mutate.MaxAnnotations+1) {
		stand["\x00"+strconv.Itoa(i)] = ""
	}
	return mutate.Relevant(stand, ns)
}

// ownKey is the JSON string key unquoted when it is under contract.Prefix
// or is the Multus networks key, else "". Only an escaped key is unquoted
// to be compared.
func ownKey(key []byte) (string, error) {
	if len(key) < 2 || key[0] != '"' {
		return "", fmt.Errorf("annotation key: want a string, got %.20q", key)
	}
	inner := key[1 : len(key)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		if !bytes.HasPrefix(inner, []byte(contract.Prefix)) && string(inner) != multus.Annotation {
			return "", nil
		}
		return string(inner), nil
	}
	var k string
	if err := kjson.UnmarshalCaseSensitivePreserveInts(key, &k); err != nil {
		return "", fmt.Errorf("annotation key: %w", err)
	}
	if !strings.HasPrefix(k, contract.Prefix) && k != multus.Annotation {
		return "", nil
	}
	return k, nil
}

// eachMember calls f with the raw key (quoted) and value of each member of
// obj, a JSON object the decoder has checked already.
func eachMember(obj []byte, f func(key, value []byte) error) error {
	i := skipSpace(obj, 1)
	for i < len(obj) && obj[i] != '}' {
		keyEnd := valueEnd(obj, i)
		key := bytes.TrimRight(obj[i:keyEnd], " \t\r\n")
		i = skipSpace(obj, keyEnd)
		if i >= len(obj) || obj[i] != ':' {
			return errors.New("malformed object")
		}
		start := skipSpace(obj, i+1)
		end := valueEnd(obj, start)
		if err := f(key, bytes.TrimRight(obj[start:end], " \t\r\n")); err != nil {
			return err
		}
		i = end
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// valueEnd is the index of the ',', ':', '}' or ']' that ends the value
// starting at i, outside nested values and strings.
func valueEnd(b []byte, i int) int {
	depth, str := 0, jsonString{}
	for ; i < len(b); i++ {
		ch := b[i]
		if str.inside(ch) {
			continue
		}
		switch ch {
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i
			}
			depth--
		case ',', ':':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}

// countValues is the number of JSON values in doc, a document the decoder
// has checked already: the root, plus one for each member of an object and
// each element of a list, which is one per comma outside strings and one
// per object or list that is not empty. One pass, no allocation.
func countValues(doc []byte) int {
	values, str, opened := 1, jsonString{}, false
	for _, ch := range doc {
		if str.inside(ch) {
			continue
		}
		switch ch {
		case ' ', '\t', '\n', '\r':
			continue
		case ',':
			values++
		}
		if opened && ch != '}' && ch != ']' {
			values++
		}
		opened = ch == '{' || ch == '['
	}
	return values
}

// elementCount is the number of elements of a JSON array. The decoder has
// checked the whole document before it hands over the array's bytes, so
// counting the commas outside nested values and strings is exact.
type elementCount int

func (c *elementCount) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '[' {
		if string(b) == "null" {
			*c = 0
			return nil
		}
		return fmt.Errorf("want a list, got %.20q", b)
	}
	s := listScan{empty: true}
	for _, ch := range b {
		s.step(ch)
	}
	*c = elementCount(s.count())
	return nil
}

// listScan counts the top-level elements of a JSON list one byte at a
// time, without decoding them: commas at depth one separate elements,
// and a list with anything but blanks inside holds at least one.
type listScan struct {
	n, depth int
	str      jsonString
	empty    bool
}

func (s *listScan) step(ch byte) {
	switch {
	case s.str.inside(ch):
	case ch == '"':
		s.empty = false
	case ch == '[' || ch == '{':
		if s.depth > 0 {
			s.empty = false
		}
		s.depth++
	case ch == ']' || ch == '}':
		s.depth--
	case ch == ',' && s.depth == 1:
		s.n++
	case ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r':
		s.empty = false
	}
}

// jsonString follows a byte-at-a-time scan in and out of JSON strings,
// where brackets, commas and colons count for nothing and a backslash
// escapes the next byte.
type jsonString struct{ in, escaped bool }

// inside reports whether ch lies inside a string the scan is in, its
// closing quote included. An opening quote is not inside: the caller sees
// it, and the bytes after it are.
func (s *jsonString) inside(ch byte) bool {
	if !s.in {
		s.in = ch == '"'
		return false
	}
	switch {
	case s.escaped:
		s.escaped = false
	case ch == '\\':
		s.escaped = true
	case ch == '"':
		s.in = false
	}
	return true
}

func (s *listScan) count() int {
	if s.empty {
		return s.n
	}
	return s.n + 1
}
