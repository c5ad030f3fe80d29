package policy

import (
	"strconv"
	"strings"

	"github.com/ibkube/ibkube/webhook/multus"
)

// CEL has no JSON parser, so the policies read the JSON form of the Multus
// networks annotation with regular expressions (RE2, as CEL's matches and
// find run them). The expressions below follow JSON's structure to a fixed
// depth: listHead consumes whole elements and, after an element's brace, a
// run of whole members, so what follows is a member of an element (depth
// 1), never one nested in another value. That is what lets the policies refuse what
// multus.ParseSelection refuses (encoding/json into the
// network-attachment-definition-client NetworkSelectionElement): an element
// that is no object, a known field of the wrong JSON type (keys matched
// without regard to case, as encoding/json matches them), a missing or
// empty name, a default route with a character no IP address has, and an
// interface name Multus cannot use. The expressions are
// loose where JSON is strict (commas, numbers, escapes): malformed JSON is
// a known difference (docs/admission-policy.md).
const (
	jsonWS     = `[\t\n\r ]*`
	jsonString = `"(?:[^"\\]|\\.)*"`
	jsonScalar = `(?:-?[0-9][0-9.eE+-]*|true|false|null)`
	// jsonDepth is how deep a member's value may nest lists and objects.
	jsonDepth = 3
)

// jsonValue is a JSON value nesting at most depth lists and objects (a
// list and an object are read alike: a run of values, each with an
// optional key).
func jsonValue(depth int) string {
	if depth == 0 {
		return `(?:` + jsonString + `|` + jsonScalar + `)`
	}
	return `(?:` + jsonString + `|` + jsonScalar + `|[\[{]` + jsonWS + jsonRun(`(?:`+jsonString+jsonWS+`:`+jsonWS+`)?`+jsonValue(depth-1)) + `[\]}])`
}

// jsonRun is any number of x separated by commas.
func jsonRun(x string) string { return `(?:` + x + jsonWS + `,?` + jsonWS + `)*` }

func jsonMember(key string) string { return key + jsonWS + `:` + jsonWS + jsonValue(jsonDepth) }

func jsonObject(member string) string { return `\{` + jsonWS + jsonRun(member) + `\}` }

// jsonKey is a member's key among keys, in any case, and its colon.
func jsonKey(keys ...string) string {
	return `"(?i:` + strings.Join(keys, "|") + `)"` + jsonWS + `:` + jsonWS
}

var (
	// listHead is the start of a JSON list and any number of whole
	// elements that are objects.
	listHead = `^` + jsonWS + `\[` + jsonWS + jsonRun(jsonObject(jsonMember(jsonString)))
)

// netListShape matches a JSON list of objects.
func netListShape() string { return listHead + `\]` + jsonWS + `$` }

// netElemBad matches a list with an element the webhook refuses: a known
// field of the wrong JSON type, a default route with a character no IP
// address has, an interface name Multus cannot use, or no name (none, ""
// or null). One pattern, so the list's head is paid for once.
func netElemBad() string {
	notString, notList, notObject := `[-0-9tf\[{]`, `[-0-9tf{"]`, `[-0-9tf\["]`
	strs := jsonKey("name", "namespace", "mac", "infiniband-guid", "interface", "ipam-claim-reference")
	anyObject := jsonObject(jsonMember(jsonString))
	stringsOrNull := jsonRun(`(?:` + jsonString + `|null)`)
	return listHead + `(?:\{` + jsonWS + jsonRun(jsonMember(jsonString)) + `(?:` + strs + notString +
		`|` + jsonKey("ips", "default-route", "portmappings") + notList +
		`|` + jsonKey("bandwidth", "cni-args") + notObject +
		`|` + jsonKey("ips", "default-route") + `\[` + jsonWS + stringsOrNull + notString +
		`|` + jsonKey("default-route") + `\[` + jsonWS + stringsOrNull + `"[0-9a-fA-F:.]*[^0-9a-fA-F:."]` +
		`|` + jsonKey("portmappings") + `\[` + jsonWS + jsonRun(`(?:`+anyObject+`|null)`) + notObject +
		`|` + jsonKey("name") + `(?:""|null)` +
		`|` + jsonKey("interface") + `"(?:(?:[^"\\]|\\.)*(?:[/ :]|\\[/tn])|(?:[^"\\]|\\.){16,})` +
		`)|` + jsonObject(jsonMember(notWord("name"))) + `)`
}

// notWord matches a JSON string other than w in any case (RE2 has no
// negative lookahead): shorter, longer, or different in some letter.
func notWord(w string) string {
	c := `(?:[^"\\]|\\.)`
	alts := []string{c + `{0,` + itoa(len(w)-1) + `}`, c + `{` + itoa(len(w)+1) + `,}`}
	for i := range w {
		other := `(?:[^"\\` + strings.ToLower(w[i:i+1]) + strings.ToUpper(w[i:i+1]) + `]|\\.)`
		alts = append(alts, c+`{`+itoa(i)+`}`+other+c+`{`+itoa(len(w)-1-i)+`}`)
	}
	return `"(?:` + strings.Join(alts, "|") + `)"`
}

func itoa(n int) string { return strconv.Itoa(n) }

// netTypeMessage is the policy's refusal of a JSON value the patterns
// find no list of well-typed network selection objects.
func netTypeMessage() string {
	return lit("annotation "+multus.Annotation+": invalid value ") + " + " + echo("variables.netRaw") + " + " +
		lit(`: not a JSON list of network selection objects, each with a non-empty string "name" and optional strings "namespace", `+
			`"interface" (at most 15 characters, no '/', ':' or white space), "mac", "infiniband-guid", "ipam-claim-reference", `+
			`lists "ips", "default-route", "portMappings" and objects "bandwidth", "cni-args"; `+multus.Accepted)
}

// netElemPattern finds each element of a well-typed JSON list in turn.
func netElemPattern() string { return jsonObject(jsonMember(jsonString)) }

// netElemHead is the start of an element and a run of its whole members:
// what follows is one of its own members.
func netElemHead() string { return `^\{` + jsonWS + jsonRun(jsonMember(jsonString)) }

// netJSONVariables are multus.Merge's and ipoibInterface's reading of a
// JSON-form value: its elements, and the indexes of those that select the
// IPoIB network (its name, and its namespace or none where the network's
// namespace is the pod's). A key written twice in an element counts where
// the patterns find it (a known difference: encoding/json keeps the last).
func netJSONVariables(nsName string) []variable {
	head := netElemHead()
	name := lit(head+jsonKey("name")+`"`) + " + params.data.ipoibName.replace('.', " + lit(`\.`) + ") + " + lit(`"`)
	ns := lit(head+jsonKey("namespace")+`"`) + " + variables.ipoibNS.replace('.', " + lit(`\.`) + ") + " + lit(`"`)
	nsSet := lit(head + jsonKey("namespace") + `"(?:[^"\\]|\\.)`)
	return []variable{
		{"netElems", "variables.netForm == 'json' ? variables.netRaw.findAll(" + lit(netElemPattern()) + ") : []"},
		{"netJSONSel", "lists.range(variables.netElems.size()).filter(i, [variables.netElems[i]].all(e, e.matches(" + name + ") && " +
			"(e.matches(" + ns + ") || variables.ipoibNS == " + nsName + " && !e.matches(" + nsSet + "))))"},
	}
}

// netJSONInterface is ipoibInterface for a JSON-form value: the interface
// the first element selecting the network asks for (its last string
// "interface", with \", \/ and \\ read), else net<position>.
func netJSONInterface() string {
	iface := "[variables.netElems[variables.netJSONSel[0]].find(" + lit(netElemHead()+jsonKey("interface")+jsonString) + ")]" +
		".map(f, f.substring(f.lastIndexOf(':') + 1).trim()).map(q, q.size() < 2 ? '' : q.substring(1, q.size() - 1)" +
		".replace(" + lit(`\"`) + ", '\"').replace(" + lit(`\/`) + ", '/').replace(" + lit(`\\`) + ", " + lit(`\`) + "))[0]"
	return "(variables.netJSONSel.size() == 0 ? 'net' + string(variables.netElems.size() + 1) : " +
		"[" + iface + "].map(i, i != '' ? i : 'net' + string(variables.netJSONSel[0] + 1))[0])"
}
