package policy

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/memlockvalue"
	"github.com/ibkube/ibkube/webhook/multus"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// The policies' bounds on work and on what they repeat, each the CEL of a
// Go rule of webhook/mutate: the container count and annotation sizes
// (mutate.checkSize), the memlock value (internal/memlockvalue), and the
// escaping of echoed values (strconv.Quote).

// sizeVariables decide mutate.checkSize: the first of the container count,
// the pod's and the namespace's ibkube annotation sizes that is over its
// bound, as the refusal message, or ”. They come before any variable
// that splits or iterates, and every split is guarded by them: splitting
// costs time with the square of the parts while the API server charges it
// linearly, and annotation sizes are validated only after admission.
func sizeVariables() []variable {
	over := func(annos string, keys []string) string {
		return firstKeyWhere(keys, func(k string) string {
			return k + " in " + annos + " && bytes(" + annos + "[" + k + "]).size() > " + strconv.Itoa(mutate.MaxAnnotationBytes)
		})
	}
	size := func(v string) string { return "string(bytes(" + v + ").size())" }
	accepted := lit(fmt.Sprintf(" bytes; accepted: at most %d bytes", mutate.MaxAnnotationBytes))
	return []variable{
		{"containerCount", containerCount},
		{"podOversized", over("variables.annos", mutate.BoundedPodKeys)},
		{"nsOversized", over("variables.nsAnnos", mutate.BoundedNamespaceKeys)},
		{"sizeRefusal", "!variables.relevant ? '' : " +
			fmt.Sprintf("variables.containerCount > %d ? 'pod has ' + string(variables.containerCount) + ", mutate.MaxContainers) +
			lit(fmt.Sprintf(" containers (containers, init containers and ephemeral containers together); accepted: at most %d in a pod ibkube admits: split the work over several pods", mutate.MaxContainers)) + " : " +
			fmt.Sprintf("variables.annoCount > %d ? 'pod has ' + string(variables.annoCount) + ", mutate.MaxAnnotations) +
			lit(fmt.Sprintf(" annotations; accepted: at most %d on a pod ibkube admits: keep bulk data out of annotations (a ConfigMap or a volume)", mutate.MaxAnnotations)) + " : " +
			"variables.podOversized.size() > 0 ? 'annotation ' + variables.podOversized[0] + ': value of ' + " + size("variables.annos[variables.podOversized[0]]") + " + " + accepted + " : " +
			"variables.nsOversized.size() > 0 ? 'namespace ' + namespaceObject.metadata.name + ' annotation ' + variables.nsOversized[0] + ': value of ' + " + size("variables.nsAnnos[variables.nsOversized[0]]") + " + " + accepted + " : ''"},
	}
}

// annotationCount is mutate.AnnotationCount: the size of the pod's
// annotations less the keys ibkube writes, looked up one by one.
func annotationCount(annos string) string {
	return annos + ".size() - " + countKeysIn(mutate.WrittenKeys(), annos)
}

// relevance is mutate.Relevant over the pod's and the namespace's
// annotation expressions and the annotation count expression: direct
// lookups first, and the look at every key only within the annotation
// count's bound, so no pod costs more to pass by than the lookups.
func relevance(annos, nsAnnos, count string) string {
	return ownKeyPresent(annos) + " || " + fmt.Sprintf("%s <= %d && (", count, mutate.MaxAnnotations) +
		lit(contract.AnnotationMode) + " in " + nsAnnos + " || " + annos + ".exists(k, k.startsWith(" + lit(contract.Prefix) + ")))"
}

// ownKeyPresent tells whether annos holds a known ibkube key.
func ownKeyPresent(annos string) string {
	return anyKeyIn(prefixed(contract.KnownKeys()), annos)
}

// The lists of keys below are constants, so each is written out key by
// key: the API server evaluates a comprehension step by step under its
// cost tracking, which for a handful of keys costs more than the lookups
// themselves.

// anyKeyIn tells whether map expression m holds one of keys.
func anyKeyIn(keys []string, m string) string {
	terms := make([]string, len(keys))
	for i, k := range keys {
		terms[i] = lit(k) + " in " + m
	}
	return "(" + strings.Join(terms, " || ") + ")"
}

// countKeysIn is how many of keys map expression m holds.
func countKeysIn(keys []string, m string) string {
	terms := make([]string, len(keys))
	for i, k := range keys {
		terms[i] = "(" + lit(k) + " in " + m + " ? 1 : 0)"
	}
	return "(" + strings.Join(terms, " + ") + ")"
}

// firstKeyWhere is the first of keys for which cond (given the key as a
// CEL literal) holds, as a list of it, or the empty list.
func firstKeyWhere(keys []string, cond func(k string) string) string {
	var b strings.Builder
	for _, k := range keys {
		b.WriteString("(" + cond(lit(k)) + ") ? [" + lit(k) + "] : ")
	}
	return "(" + b.String() + "[])"
}

// containerCount is the pod's containers of every kind.
const containerCount = "object.spec.containers.size() + object.spec.?initContainers.orValue([]).size() + object.spec.?ephemeralContainers.orValue([]).size()"

// matchBounded is the mutating policy's match condition: a pod within
// the annotation count's bound. Match conditions read neither variables
// nor the namespace, so it is written over the pod itself; the pods it
// lets through are decided by relevance.
func matchBounded() string {
	annos := "object.metadata.?annotations.orValue({})"
	return fmt.Sprintf("(%s) <= %d", annotationCount(annos), mutate.MaxAnnotations)
}

// guarded is a splitting expression that yields [] once a size refusal
// stands, so no oversized value is ever split.
func guarded(expr string) string {
	return "variables.sizeRefusal != '' ? [] : " + expr
}

// netBytes is mutate.NetworksBytes: the networks value's size less the
// IPoIB network the mutation appends, where the value holds it.
func netBytes() string {
	return "(bytes(variables.netRaw).size() - (variables.netForm == 'json' ? " +
		"(variables.netRaw.contains(',' + params.data.ipoibJSON) ? bytes(params.data.ipoibJSON).size() + 1 : 0) : " +
		"(variables.netRaw.contains(', ' + params.data.ipoibCSV) ? bytes(params.data.ipoibCSV).size() + 2 : 0)))"
}

// netOversized is mutate.checkNetworksSize's test on the networks value.
func netOversized() string {
	return fmt.Sprintf("%s > %d", netBytes(), mutate.MaxNetworksBytes)
}

// netOversizedMessage is mutate.checkNetworksSize's refusal.
func netOversizedMessage() string {
	return lit("annotation "+multus.Annotation+": value of ") + " + string(" + netBytes() + ") + " +
		lit(fmt.Sprintf(" bytes; accepted: at most %d bytes", mutate.MaxNetworksBytes))
}

// netJSONOversized is mutate.checkNetworksSize's test on a JSON-form
// networks value, and netJSONOversizedMessage its refusal.
func netJSONOversized() string {
	return fmt.Sprintf("variables.netForm == 'json' && %s > %d", netBytes(), mutate.MaxNetworksJSONBytes)
}

func netJSONOversizedMessage() string {
	return lit("annotation "+multus.Annotation+": a JSON value of ") + " + string(" + netBytes() + ") + " +
		lit(fmt.Sprintf(" bytes; accepted: at most %d bytes in the JSON form (%d as a comma-separated list)", mutate.MaxNetworksJSONBytes, mutate.MaxNetworksBytes))
}

// netTypeBad tells a JSON-form networks value the webhook's decoder
// refuses though it is well-formed JSON: no list of objects, or an element
// with a wrong-typed or missing field (see jsonnet.go).
func netTypeBad() string {
	return "variables.netForm == 'json' && (!variables.netRaw.matches(" + lit(netListShape()) + ") || " +
		"variables.netRaw.matches(" + lit(netElemBad()) + "))"
}

// memlockProblem is memlockvalue.Parse's verdict on the trimmed value t,
// as its Problem, or ” when accepted. A quantity's isInteger() is false
// for whole values held as a decimal (1.5Gi, 1000m, 9223372036854775806),
// so wholeness is decided exactly: the value less the nearest integer the
// float approximation gives (after taking 2^62 off large values, so the
// conversion to int cannot overflow) is a small remainder, whole when it
// equals its own integer part. Values from 2^63 up are too large before
// any wholeness test, where the webhook says "not whole" first for a
// fractional one (a known difference).
func memlockProblem(t string) string {
	q := "quantity(" + t + ")"
	const big = "4611686018427387904" // 2^62
	whole := "[" + q + ".compareTo(quantity('" + big + "')) >= 0 ? " + q + ".sub(" + big + ") : " + q + "]" +
		".map(q, [q.sub(int(q.asApproximateFloat()))].map(r, r.compareTo(quantity(string(int(r.asApproximateFloat())))) == 0)[0])[0]"
	return t + ".lowerAscii() == 'unlimited' ? '' : " +
		"!isQuantity(" + t + ") ? " + lit(memlockvalue.NotQuantity) + " : " +
		"!" + q + ".isGreaterThan(quantity('0')) ? " + lit(memlockvalue.NotPositive) + " : " +
		q + ".compareTo(quantity('9223372036854775807')) >= 0 ? " + lit(memlockvalue.TooLarge+" (below 8Ei)") + " : " +
		"!(" + whole + ") ? " + lit(memlockvalue.NotWhole) + " : ''"
}

// escapeUnprintable is strconv.Quote's escaping of the characters CEL's
// strings.quote leaves raw, over the quoted expression s: control and
// format characters and line and paragraph separators of the Basic
// Multilingual Plane. Other characters strconv.Quote escapes (private use,
// unassigned, beyond the BMP) are repeated raw (a known difference).
func escapeUnprintable(s string) string {
	var b strings.Builder
	b.WriteString(s)
	for r := rune(0); r < 0x10000; r++ {
		if !unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) || strconv.IsPrint(r) {
			continue
		}
		q := strconv.Quote(string(r))
		switch r {
		case '\a', '\b', '\f', '\n', '\r', '\t', '\v': // strings.quote escapes these itself
			continue
		}
		b.WriteString(".replace(" + lit(string(r)) + ", " + lit(q[1:len(q)-1]) + ")")
	}
	return b.String()
}
