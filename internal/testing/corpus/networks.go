package corpus

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
)

// RandomNetworks returns n well-formed JSON values for the Multus networks
// annotation, drawn from seed: mostly lists of network selection objects
// whose members have the right JSON types, with wrong-typed known fields,
// empty names, elements that are no objects, values that are no lists, and
// known field names nested inside other values (where any type is
// accepted) mixed in. The keys are written without escapes and once per
// object (docs/admission-policy.md lists both as differences).
func RandomNetworks(seed uint64, n int) []string {
	g := netGen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	out := make([]string, n)
	for i := range out {
		b, err := json.Marshal(g.top())
		if err != nil {
			panic(err) // values of maps, slices and scalars always marshal
		}
		out[i] = string(b)
	}
	return out
}

type netGen struct{ r *rand.Rand }

func (g netGen) pick(n int) int        { return g.r.IntN(n) }
func (g netGen) chance(p float64) bool { return g.r.Float64() < p }

// top is a whole annotation value.
func (g netGen) top() any {
	switch {
	case g.chance(0.04):
		return g.element()
	case g.chance(0.04):
		return g.any(1)
	}
	list := make([]any, g.pick(4))
	for i := range list {
		list[i] = g.element()
	}
	return list
}

// element is one entry of the list: mostly an object.
func (g netGen) element() any {
	if g.chance(0.08) {
		return g.any(2)
	}
	obj := map[string]any{}
	if !g.chance(0.06) {
		obj[g.spelling("name")] = g.typed(netFieldString, []any{"a", "ibkube-ipoib", "storage-net", "", nil})
	}
	for _, f := range netFields {
		if g.chance(0.25) {
			obj[g.spelling(f.name)] = g.typed(f.kind, f.good)
		}
	}
	for range g.pick(3) {
		obj[[]string{"x", "opts", "labels"}[g.pick(3)]] = g.any(3)
	}
	return obj
}

// spelling is key as written: encoding/json matches keys without regard
// to case, so the policies must too.
func (g netGen) spelling(key string) string {
	switch {
	case g.chance(0.05):
		return strings.ToUpper(key)
	case g.chance(0.05):
		return strings.ToUpper(key[:1]) + key[1:]
	}
	return key
}

type netFieldKind int

const (
	netFieldString netFieldKind = iota
	netFieldStrings
	netFieldObject
	netFieldObjects
)

// netFields are the optional members of a network selection element
// (network-attachment-definition-client NetworkSelectionElement), with
// values of the right type.
var netFields = []struct {
	name string
	kind netFieldKind
	good []any
}{
	{"namespace", netFieldString, []any{"ibkube-system", "team-a", nil}},
	{"interface", netFieldString, []any{"net1", "ib0", "", nil}},
	{"mac", netFieldString, []any{"c2:b0:57:49:47:f1"}},
	{"infiniband-guid", netFieldString, []any{"c2:b0:57:49:47:f1:00:01"}},
	{"ipam-claim-reference", netFieldString, []any{"claim-1"}},
	{"ips", netFieldStrings, []any{[]any{"10.1.2.3/24"}, []any{}, []any{"fd00::1/64", nil}, nil}},
	{"default-route", netFieldStrings, []any{[]any{"10.1.2.1"}, []any{"fd00::1", nil}, nil}},
	{"portMappings", netFieldObjects, []any{[]any{map[string]any{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}}, []any{nil}, nil}},
	{"bandwidth", netFieldObject, []any{map[string]any{"ingressRate": 1000, "egressBurst": 10}, nil}},
	{"cni-args", netFieldObject, []any{map[string]any{"name": 1, "interface": []any{true}, "k": "v"}, map[string]any{}, nil}},
}

// typed is one of good, or now and then a value of another JSON type.
func (g netGen) typed(kind netFieldKind, good []any) any {
	if !g.chance(0.2) {
		return good[g.pick(len(good))]
	}
	v := g.any(2)
	switch kind {
	case netFieldStrings, netFieldObjects:
		if l, ok := v.([]any); ok && g.chance(0.5) { // a list of the wrong elements
			return append(l, g.any(1))
		}
	}
	return v
}

// any is a JSON value of any type nested at most depth deep; objects
// inside may use the known field names with any type.
func (g netGen) any(depth int) any {
	n := 6
	if depth <= 0 {
		n = 4
	}
	switch g.pick(n) {
	case 0:
		return []string{"a", "", "net1", `q"uote`}[g.pick(4)]
	case 1:
		return []any{0, -3, 1.5, 1e21}[g.pick(4)]
	case 2:
		return g.chance(0.5)
	case 3:
		return nil
	case 4:
		l := make([]any, g.pick(3))
		for i := range l {
			l[i] = g.any(depth - 1)
		}
		return l
	}
	m := map[string]any{}
	for range g.pick(3) {
		m[[]string{"name", "interface", "ips", "k", "bandwidth"}[g.pick(5)]] = g.any(depth - 1)
	}
	return m
}

// JSONNetworksOfSize is a JSON networks value of exactly n bytes (n of at
// least 64): well-typed elements, the last one padded.
func JSONNetworksOfSize(n int) string {
	const el = `{"name":"storage-net","namespace":"team-a","interface":"net9","ips":["10.1.2.3/24"]}`
	var els []string
	for size := 1; size+len(el)+1+64 < n; size += len(el) + 1 {
		els = append(els, el)
	}
	v := "[" + strings.Join(els, ",")
	if len(els) > 0 {
		v += ","
	}
	v += `{"name":"pad","x":"`
	return v + strings.Repeat("p", n-len(v)-3) + `"}]`
}
