package policy

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/memlockvalue"
	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/multus"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// The CEL below mirrors webhook/mutate step by step; each variable names
// the Go function it stands for. Keys, modes and paths are written in from
// the mutate package, so the policy and the webhook cannot disagree on a
// name. Everything a site configures comes from params.data (see Params).

// lit is s as a CEL string literal.
func lit(s string) string { return strconv.Quote(s) }

// list is ss as a CEL list of string literals.
func list(ss ...string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = lit(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// maxEcho and maxMessage are webhook/mutate's bounds on what a refusal
// repeats of the pod.
const (
	maxEcho    = 256
	maxMessage = 4096
)

// bound is mutate's bound(s, n) over a CEL string expression: s cut to n
// characters plus a marker naming how many were cut.
func bound(s string, n int) string {
	return fmt.Sprintf("(%[1]s.size() <= %[2]d ? %[1]s : %[1]s.substring(0, %[2]d) + '...[' + string(%[1]s.size() - %[2]d) + ' more bytes]')", s, n)
}

// gpuCountText is mutate's gpuCountText over a CEL count expression g.
func gpuCountText(g string) string {
	return fmt.Sprintf("(%[1]s > %[2]d ? 'more than %[2]d' : %[1]s < -%[2]d ? 'less than -%[2]d' : string(%[1]s))", g, mutate.MaxGPUCount)
}

// echo is mutate's echo: the value bounded and quoted.
func echo(s string) string { return escapeUnprintable("strings.quote(" + bound(s, maxEcho) + ")") }

// gpuCount is mutate's gpuCount for container expression c and resource
// expression r: the limit, else the request, rounded away from zero to an
// integer (resource.Quantity's Value).
// Values beyond mutate.MaxGPUCount either side of zero read as one beyond
// it: refused all the same, and repeated as gpuCountText says.
//
// A quantity the API server holds is in canonical form, so a count of GPUs
// is nearly always plain digits: those are read as an integer, and only
// other forms ("1k", "500m") are parsed as a quantity, which the API
// server's CEL does several times over per container. The value is made a
// string before int(): a typed pod's quantity reaches CEL as a value that
// converts to a string but has no int() overload of its own.
func gpuCount(c, r string) string {
	q := fmt.Sprintf("%[1]s.?resources.?limits[?%[2]s].or(%[1]s.?resources.?requests[?%[2]s])", c, r)
	v := "quantity(" + q + ".value())"
	return fmt.Sprintf("(%[1]s.hasValue() ? (%[1]s.value().matches('^[0-9]{1,6}$') ? int(string(%[1]s.value())) : "+
		"%[2]s.compareTo(quantity('%[3]d')) > 0 ? %[3]d + 1 : %[2]s.compareTo(quantity('-%[3]d')) < 0 ? -%[3]d - 1 : "+
		"%[2]s.isInteger() ? %[2]s.asInteger() : int(%[2]s.asApproximateFloat()) + (%[2]s.asApproximateFloat() < 0.0 ? -1 : 1)) : 0)", q, v, mutate.MaxGPUCount)
}

// rangeRegex is a regular expression matching the decimal integers from 1
// to max without leading zeros, alternatives shortest first
// ("[1-9]|[1-5][0-9]|6[0-4]" for 64): CEL cannot parse a number it does not
// know to be small, so the bound is written into the pattern.
func rangeRegex(max int) string {
	digits := strconv.Itoa(max)
	class := func(lo, hi byte) string {
		if lo == hi {
			return string(lo)
		}
		return "[" + string(lo) + "-" + string(hi) + "]"
	}
	var alts []string
	for n := 1; n < len(digits); n++ {
		alts = append(alts, "[1-9]"+strings.Repeat("[0-9]", n-1))
	}
	for i := range len(digits) {
		lo := byte('0')
		if i == 0 {
			lo = '1'
		}
		hi := digits[i]
		if i < len(digits)-1 {
			hi-- // the numbers below max's prefix here, any digits after
		}
		if hi >= lo {
			alts = append(alts, digits[:i]+class(lo, hi)+strings.Repeat("[0-9]", len(digits)-1-i))
		}
	}
	return strings.Join(alts, "|")
}

type variable struct{ name, expr string }

// refusalStep is one check of the refusal chain: its condition and the
// message expression when it holds.
type refusalStep struct{ cond, msg string }

// enumRefusal is mutate.checkEnum (and parseSocketFallback's check, sep
// ": accepted: ") for key: the values and the accepted text from
// contract.Enums.
func enumRefusal(key, sep string) refusalStep {
	e, _ := contract.EnumOf(key)
	v := "variables.annos[" + lit(key) + "]"
	return refusalStep{lit(key) + " in variables.annos && !(" + v + " in " + list(e.Values...) + ")",
		lit("annotation "+key+": invalid value ") + " + " + echo(v) + " + " + lit(sep+e.Accepted)}
}

// prefixed is each suffix under contract.Prefix.
func prefixed(suffixes []string) []string {
	out := make([]string, len(suffixes))
	for i, s := range suffixes {
		out[i] = contract.Prefix + s
	}
	return out
}

// variables are shared by the mutating and the validating policy: the
// validating one refuses exactly where the mutating one stands back.
func variables() []variable {
	a := lit
	P := contract.Prefix
	nsName := "namespaceObject.metadata.name"
	known := contract.KnownKeys()
	acceptedKeys := contract.AcceptedKeys()
	acceptedModes := contract.AcceptedModes
	modeNames := list(contract.ModeNames()...)
	sf, _ := contract.EnumOf(contract.AnnotationSocketFallback)
	sfAccepted := ": accepted: " + sf.Accepted
	netAccepted := "; accepted: a comma-separated list of [namespace/]name[@interface] or a JSON list of network selection elements"
	memlockV := "variables.annos[" + a(contract.AnnotationMemlock) + "]"
	memlockT := memlockV + ".trim()"
	csvItem := `^\s*([a-z0-9]([-a-z0-9]*[a-z0-9])?\s*/\s*)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\s*@\s*[a-z0-9]([-a-z0-9]{0,13}[a-z0-9])?)?\s*$`

	v := []variable{
		{"annos", "object.metadata.?annotations.orValue({})"},
		{"nsAnnos", "namespaceObject.metadata.?annotations.orValue({})"},
		{"nsLabels", "namespaceObject.metadata.?labels.orValue({})"},
		{"inits", "object.spec.?initContainers.orValue([])"},
		{"annoCount", annotationCount("variables.annos")},
		{"relevant", relevance("variables.annos", "variables.nsAnnos", "variables.annoCount")},
	}
	v = append(v, sizeVariables()...)
	v = append(v, []variable{

		// resolveProfile
		{"profileSrc", a(contract.AnnotationProfile) + " in variables.annos ? 'pod' : " + a(contract.AnnotationProfile) + " in variables.nsAnnos ? 'ns' : 'cfg'"},
		{"profileName", "variables.profileSrc == 'pod' ? variables.annos[" + a(contract.AnnotationProfile) + "] : variables.profileSrc == 'ns' ? variables.nsAnnos[" + a(contract.AnnotationProfile) + "] : params.data.defaultProfile"},
		{"pk", "'profile.' + variables.profileName + '.'"},
		{"profileKnown", "(variables.pk + 'gpusPerNode') in params.data"},
		// gpuResource
		{"gpuRes", "variables.profileKnown && params.data[variables.pk + 'gpuResource'] != '' ? params.data[variables.pk + 'gpuResource'] : params.data.gpuResource"},
		{"gpuC", "object.spec.containers.map(c, " + gpuCount("c", "variables.gpuRes") + ")"},
		{"gpuI", "variables.inits.map(c, " + gpuCount("c", "variables.gpuRes") + ")"},
		// requestsGPU(podGPUResources)
		{"requestsGPU", "variables.gpuC.exists(g, g > 0) || variables.gpuI.exists(g, g > 0) || " +
			"object.spec.containers.exists(c, " + gpuCount("c", "params.data.gpuResource") + " > 0) || " +
			"variables.inits.exists(c, " + gpuCount("c", "params.data.gpuResource") + " > 0)"},

		// resolveMode, parseMode
		{"modeSrc", a(contract.AnnotationMode) + " in variables.annos ? 'pod' : " + a(contract.AnnotationMode) + " in variables.nsAnnos && variables.requestsGPU ? 'ns' : ''"},
		{"modeRaw", "variables.modeSrc == 'pod' ? variables.annos[" + a(contract.AnnotationMode) + "] : variables.modeSrc == 'ns' ? variables.nsAnnos[" + a(contract.AnnotationMode) + "] : ''"},
		{"modeWhere", "variables.modeSrc == 'pod' ? " + a("annotation "+contract.AnnotationMode) + " : 'namespace ' + " + nsName + " + " + a(" annotation "+contract.AnnotationMode)},
		{"modeParts", guarded("variables.modeRaw.split(',').map(p, p.trim())")},
		{"modeBad", "variables.modeSrc == '' ? '' : " +
			"variables.modeParts.exists(p, !(p in " + modeNames + ")) ? " +
			"variables.modeWhere + ': invalid value ' + " + echo("variables.modeRaw") + " + ': unknown mode ' + " +
			echo("variables.modeParts.filter(p, !(p in "+modeNames+"))[0]") + " + " + a("; accepted: "+acceptedModes) + " : " +
			lit(contract.ModeShared) + " in variables.modeParts && " + lit(contract.ModeExclusive) + " in variables.modeParts ? " +
			"variables.modeWhere + ': invalid value ' + " + echo("variables.modeRaw") + " + " + a(": "+contract.ModeShared+" and "+contract.ModeExclusive+" exclude each other; accepted: "+acceptedModes) + " : " +
			lit(contract.ModeNone) + " in variables.modeParts && variables.modeParts.exists(p, p != " + lit(contract.ModeNone) + ") ? " +
			"variables.modeWhere + ': invalid value ' + " + echo("variables.modeRaw") + " + " + a(": "+contract.ModeNone+" cannot be combined; accepted: "+acceptedModes) + " : ''"},
		{"shared", "variables.modeSrc != '' && " + lit(contract.ModeShared) + " in variables.modeParts"},
		{"exclusive", "variables.modeSrc != '' && " + lit(contract.ModeExclusive) + " in variables.modeParts"},
		{"ipoib", "variables.modeSrc != '' && " + lit(contract.ModeIPoIB) + " in variables.modeParts"},
		{"rdma", "variables.shared || variables.exclusive"},
		{"injectMode", "variables.modeBad == '' && (variables.rdma || variables.ipoib)"},
		{"modeName", "(variables.shared ? " + lit(contract.ModeShared) + " : variables.exclusive ? " + lit(contract.ModeExclusive) + " : '') + " +
			"(variables.ipoib ? (variables.rdma ? ',' : '') + " + lit(contract.ModeIPoIB) + " : '')"},

		// selectContainers
		{"cNames", guarded(a(contract.AnnotationContainers) + " in variables.annos ? variables.annos[" + a(contract.AnnotationContainers) + "].split(',').map(n, n.trim()) : []")},
		{"allNames", "object.spec.containers.map(c, c.name) + variables.inits.map(c, c.name)"},
		{"selC", a(contract.AnnotationContainers) + " in variables.annos ? " +
			"lists.range(object.spec.containers.size()).filter(i, object.spec.containers[i].name in variables.cNames) : " +
			"variables.gpuC.exists(g, g > 0) ? lists.range(object.spec.containers.size()).filter(i, variables.gpuC[i] > 0) : " +
			"lists.range(object.spec.containers.size())"},
		{"selI", a(contract.AnnotationContainers) + " in variables.annos ? lists.range(variables.inits.size()).filter(i, variables.inits[i].name in variables.cNames) : []"},
		{"tgtGPU", "variables.selC.map(i, variables.gpuC[i]) + variables.selI.map(i, variables.gpuI[i])"},
		{"tgtName", "variables.selC.map(i, object.spec.containers[i].name) + variables.selI.map(i, variables.inits[i].name)"},

		// parseHCAs, exclusiveCounts
		{"hcasOK", "!(" + a(contract.AnnotationHCAs) + " in variables.annos) || variables.annos[" + a(contract.AnnotationHCAs) + "].trim().matches('^[+]?0*(" + rangeRegex(config.MaxHCAs) + ")$')"},
		{"hcas", a(contract.AnnotationHCAs) + " in variables.annos && variables.hcasOK ? int(variables.annos[" + a(contract.AnnotationHCAs) + "].trim()) : 0"},
		{"perGPU", "variables.profileKnown && int(params.data[variables.pk + 'hcasPerGPU']) > 1 ? int(params.data[variables.pk + 'hcasPerGPU']) : 1"},
		{"badCount", fmt.Sprintf("variables.hcas > 0 ? [] : lists.range(variables.tgtGPU.size()).filter(i, variables.tgtGPU[i] < 0 || variables.tgtGPU[i] > %d / variables.perGPU)", config.MaxHCAs)},

		// resolveSocketFallback
		{"sfNsBad", "!(" + a(contract.AnnotationSocketFallback) + " in variables.annos) && " + a(contract.AnnotationSocketFallback) + " in variables.nsAnnos && " +
			"!(variables.nsAnnos[" + a(contract.AnnotationSocketFallback) + "] in " + list(sf.Values...) + ")"},
		{"failClosed", a(contract.AnnotationSocketFallback) + " in variables.annos ? variables.annos[" + a(contract.AnnotationSocketFallback) + "] == " + lit(contract.SocketFallbackDeny) + " : " +
			a(contract.AnnotationSocketFallback) + " in variables.nsAnnos && variables.nsAnnos[" + a(contract.AnnotationSocketFallback) + "] == " + lit(contract.SocketFallbackDeny)},

		// multus.ParseSelection (the CSV form; the JSON form is not parsed)
		{"netRaw", a(multus.Annotation) + " in variables.annos ? variables.annos[" + a(multus.Annotation) + "] : ''"},
		{"netForm", "variables.netRaw.trim() == '' ? 'empty' : variables.netRaw.matches('[\\\\[{\"]') ? 'json' : 'csv'"},
		{"netOversized", netOversized()},
		{"netItems", guarded("variables.netForm == 'csv' && !variables.netOversized ? variables.netRaw.split(',') : []")},
		{"netBad", "variables.netItems.filter(e, !e.matches(" + lit(csvItem) + "))"},
		// [namespace, name, interface] of each CSV entry, the namespace resolved.
		{"netParsed", "variables.netBad.size() > 0 ? [] : variables.netItems.map(e, [" +
			"e.contains('/') ? e.split('/')[0].trim() : " + nsName + ", " +
			"(e.contains('/') ? e.split('/')[1] : e).split('@')[0].trim(), " +
			"e.contains('@') ? e.split('@')[1].trim() : ''])"},
		{"ipoibNS", "params.data.ipoibNamespace != '' ? params.data.ipoibNamespace : " + nsName},
	}...)
	v = append(v, netJSONVariables(nsName)...)
	v = append(v, variable{"netJSONOversized", netJSONOversized()}, variable{"netTypeBad", netTypeBad()})
	v = append(v, variable{"netHas", "variables.netForm == 'csv' ? variables.netParsed.exists(n, n[0] == variables.ipoibNS && n[1] == params.data.ipoibName) : " +
		"variables.netForm == 'json' && variables.netJSONSel.size() > 0"})
	// The refusal: the first thing mutate.Mutate refuses, in its order, or ''.
	refusals := []refusalStep{
		{"variables.sizeRefusal != ''", "variables.sizeRefusal"},
		{"variables.annos.exists(k, k.startsWith(" + a(P) + ") && !(k.substring(" + strconv.Itoa(len(P)) + ") in " + list(known...) + "))",
			"'annotation ' + " + bound("variables.annos.filter(k, k.startsWith("+a(P)+") && !(k.substring("+strconv.Itoa(len(P))+") in "+list(known...)+"))[0]", maxEcho) + " + " +
				a(": unknown key under "+P+"; accepted keys: "+acceptedKeys)},
		{a(contract.AnnotationMemlock) + " in variables.annos && variables.memlockProblem != ''",
			a("annotation "+contract.AnnotationMemlock+": invalid value ") + " + " + echo(memlockV) + " + ': ' + variables.memlockProblem + " + a("; want "+memlockvalue.Accepted)},
		enumRefusal(contract.AnnotationSocketFallback, ": accepted: "),
		enumRefusal(contract.AnnotationIdleWarning, "; accepted: "),
		// checkPlacement
		enumRefusal(contract.AnnotationPlacement, "; accepted: "),
		{"variables.modeBad != ''", "variables.modeBad"},
		{"variables.injectMode && variables.sfNsBad",
			"'namespace ' + " + nsName + " + " + a(" annotation "+contract.AnnotationSocketFallback+": invalid value ") + " + " +
				echo("variables.nsAnnos["+a(contract.AnnotationSocketFallback)+"]") + " + " + a(sfAccepted)},
		{"variables.injectMode && !variables.profileKnown",
			"(variables.profileSrc == 'pod' ? " + a("annotation "+contract.AnnotationProfile) + " : variables.profileSrc == 'ns' ? 'namespace ' + " + nsName + " + " + a(" annotation "+contract.AnnotationProfile) + " : 'config defaultProfile') + " +
				"': invalid value ' + " + echo("variables.profileName") + " + ': unknown profile; accepted: ' + params.data.profiles"},
		{"variables.injectMode && variables.cNames.exists(n, n == '' || !(n in variables.allNames))",
			a("annotation "+contract.AnnotationContainers+": invalid value ") + " + " + echo("variables.annos["+a(contract.AnnotationContainers)+"]") +
				" + ': no container named ' + " + echo("variables.cNames.filter(n, n == '' || !(n in variables.allNames))[0]") +
				" + \"; accepted: a comma-separated list of this pod's containers: \" + " +
				bound("(object.spec.containers.map(c, c.name) + variables.inits.map(c, c.name + (c.?restartPolicy.orValue('') == 'Always' ? ' (sidecar)' : ' (init)'))).join(', ')", maxEcho)},
		{"variables.injectMode && !variables.hcasOK",
			a("annotation "+contract.AnnotationHCAs+": invalid value ") + " + " + echo("variables.annos["+a(contract.AnnotationHCAs)+"]") +
				" + " + a(fmt.Sprintf(": accepted: an integer from 1 to %d (HCAs per selected container)", config.MaxHCAs))},
		{"variables.injectMode && variables.exclusive && variables.badCount.size() > 0",
			"'container ' + " + escapeUnprintable("strings.quote(variables.tgtName[variables.badCount[0]])") + " + ' requests ' + variables.gpuRes + ': ' + " + gpuCountText("variables.tgtGPU[variables.badCount[0]]") + " + " +
				a(fmt.Sprintf(", which gives no rdma-exclusive count from 1 to %d (", config.MaxHCAs)) + " + string(variables.perGPU) + ' HCA(s) per GPU, profile ' + variables.profileName + " +
				a("); accepted: a GPU count from 1 to ") + " + string(" + strconv.Itoa(config.MaxHCAs) + " / variables.perGPU) + " +
				a(fmt.Sprintf(", or annotation %s with an integer from 1 to %d", contract.AnnotationHCAs, config.MaxHCAs))},
		{"variables.injectMode && variables.ipoib && variables.netOversized", netOversizedMessage()},
		{"variables.injectMode && variables.ipoib && variables.netJSONOversized", netJSONOversizedMessage()},
		{"variables.injectMode && variables.ipoib && variables.netTypeBad", netTypeMessage()},
		{"variables.injectMode && variables.ipoib && variables.netBad.size() > 0",
			a("annotation "+multus.Annotation+": invalid value ") + " + " + echo("variables.netRaw") + " + " +
				a(": annotation "+multus.Annotation+" entry ") + " + string(variables.netItems.indexOf(variables.netBad[0]) + 1) + (variables.netBad[0].trim() == '' ? '' : ' ' + " + escapeUnprintable("strings.quote(variables.netBad[0].trim())") + ") + " +
				"(variables.netBad[0].trim() == '' ? ': empty entry (a stray comma?); ' : " + a(": not [namespace/]name[@interface] with each part a lower-case DNS label ([a-z0-9], '-' inside) and an interface of at most 15 characters; ") + ") + " +
				a(multus.Accepted+netAccepted)},
	}
	var chain strings.Builder
	for _, r := range refusals {
		chain.WriteString("(" + r.cond + ") ? " + r.msg + " : ")
	}
	chain.WriteString("''")
	v = append(v,
		variable{"memlockProblem", memlockProblem(memlockT)},
		variable{"refusal", "!variables.relevant ? '' : " + chain.String()},
		// The mutation does not wait for the refusal chain, which only the
		// validating policy reads: a pod it refuses may be mutated first,
		// so the mutation stands back only where it would fail (an unknown
		// profile) or change what a refusal repeats (the networks value).
		// Everything else a refusal reads, the mutation leaves as it was.
		variable{"active", "variables.relevant && variables.sizeRefusal == '' && variables.injectMode && variables.profileKnown && " +
			"(!variables.ipoib || !(variables.netOversized || variables.netJSONOversized || variables.netTypeBad || variables.netBad.size() > 0))"},
	)
	return append(v, mutationVariables()...)
}

// mutationVariables compute what mutate.Mutate writes.
func mutationVariables() []variable {
	a := lit
	nsName := "namespaceObject.metadata.name"
	return append([]variable{
		// ipoibInterface
		{"netMatch", "lists.range(variables.netParsed.size()).filter(i, variables.netParsed[i][0] == variables.ipoibNS && variables.netParsed[i][1] == params.data.ipoibName)"},
		{"ifname", "!variables.ipoib || variables.rdma ? '' : params.data.ipoibInterface != '' ? params.data.ipoibInterface : " +
			"variables.netForm == 'csv' && variables.netMatch.size() > 0 ? " +
			"(variables.netParsed[variables.netMatch[0]][2] != '' ? variables.netParsed[variables.netMatch[0]][2] : 'net' + string(variables.netMatch[0] + 1)) : " +
			"variables.netForm == 'csv' ? 'net' + string(variables.netItems.size() + 1) : " +
			"variables.netForm == 'json' ? " + netJSONInterface() + " : 'net1'"},
		// ncclConf
		{"gpn", "int(params.data[variables.pk + 'gpusPerNode'])"},
		{"wholeNode", "variables.gpn > 0 && variables.tgtGPU.exists(g, g == variables.gpn) && variables.tgtGPU.all(g, g == 0 || g == variables.gpn)"},
		// The lines ibkube writes first, and the profile's after them as
		// ProfileParams rendered them for this case.
		{"pre", "(variables.rdma ? 'NCCL_IB_DISABLE=0\\n' : '') + (variables.failClosed && variables.rdma ? 'NCCL_NET=IB\\n' : '') + " +
			"(variables.ifname != '' ? 'NCCL_SOCKET_IFNAME=' + variables.ifname + '\\n' : '')"},
		{"conf", "'# Written by ibkube: profile ' + variables.profileName + ', mode ' + variables.modeName + '.\\n# Any environment variable overrides a line here.\\n' + " +
			"variables.pre + params.data[variables.pk + " + lit(confPrefix) + " + " +
			"(variables.rdma ? (variables.failClosed ? " + lit(confRDMAClosed) + " : " + lit(confRDMA) + ") : variables.ifname != '' ? " + lit(confIPoIB) + " : " + lit(confNone) + ") + " +
			"(variables.wholeNode ? " + lit(confWhole) + " : " + lit(confPartial) + ")]"},
		// the capability policy
		{"addCap", "variables.rdma && (params.data.capabilityPolicy == " + a(string(config.CapabilityAlways)) + " || params.data.capabilityPolicy == " + a(string(config.CapabilityAuto)) +
			" && !(variables.nsLabels[?" + a(mutate.LabelPodSecurityEnforce) + "].orValue('') in ['baseline', 'restricted']))"},
		{"exclRes", "params.data[variables.pk + 'exclusiveResource'] != '' ? params.data[variables.pk + 'exclusiveResource'] : params.data.exclusiveResource"},
		// [name, value] of each of the profile's env lines
		// the resources' names as JSON Pointer tokens, and each target's
		// rdma-exclusive count (exclusiveCounts)
		{"sharedEsc", "params.data.sharedResource.replace('~', '~0').replace('/', '~1')"},
		{"exclEsc", "variables.exclRes.replace('~', '~0').replace('/', '~1')"},
		{"exclCount", "variables.tgtGPU.map(g, string(variables.hcas > 0 ? variables.hcas : g == 0 ? int(params.data.defaultHCAs) : g * variables.perGPU))"},
		{"profEnv", "params.data[variables.pk + 'env'].split('\\n').filter(l, l != '').map(l, [l.substring(0, l.indexOf('=')), l.substring(l.indexOf('=') + 1)])"},
		// multus.Merge
		{"netValue", "variables.netForm == 'empty' ? params.data.ipoibCSV : variables.netForm == 'csv' ? variables.netRaw.trim() + ', ' + params.data.ipoibCSV : " +
			"variables.netRaw.lastIndexOf(']') < 0 ? variables.netRaw : " +
			"[variables.netRaw.substring(0, variables.netRaw.lastIndexOf(']')).find('^[\\\\s\\\\S]*[^ \\\\t\\\\r\\\\n]')].map(h, h + (h.trim() == '[' ? '' : ',') + params.data.ipoibJSON + variables.netRaw.substring(variables.netRaw.lastIndexOf(']')))[0]"},
		{"injected", "'mode=' + variables.modeName + '; containers=' + variables.tgtName.sort().join(',') + '; profile=' + variables.profileName + '; version=' + params.data.version"},
		// [op, escaped key, value] of each annotation to write
		{"annoOps", "(" + a(contract.AnnotationNCCLConf) + " in variables.annos ? [] : [['add', " + a(escape(contract.AnnotationNCCLConf)) + ", string(variables.conf)]]) + " +
			"(variables.rdma && !(" + a(contract.AnnotationMemlock) + " in variables.annos) ? [['add', " + a(escape(contract.AnnotationMemlock)) + ", string(params.data.memlock)]] : []) + " +
			"(variables.ipoib && !variables.netHas && variables.netValue != variables.netRaw ? [[variables.netForm == 'empty' && !(" + a(multus.Annotation) + " in variables.annos) ? 'add' : 'replace', " + a(escape(multus.Annotation)) + ", string(variables.netValue)]] : []) + " +
			"(" + a(contract.AnnotationInjected) + " in variables.annos ? [] : [['add', " + a(escape(contract.AnnotationInjected)) + ", string(variables.injected)]])"},
		{"mountsConf", "(object.spec.containers + variables.inits).exists(c, c.?volumeMounts.orValue([]).exists(m, m.name == " + a(contract.NCCLConfVolume) + ")) || " +
			"variables.selC.exists(i, !" + mountSkip("object.spec.containers[i]") + ") || variables.selI.exists(i, !" + mountSkip("variables.inits[i]") + ")"},
		{"podNS", nsName},
	}, jobAffinityVariables()...)
}

// jobAffinityVariables are mutate's jobSelector and statesPartitionAffinity.
func jobAffinityVariables() []variable {
	a := lit
	labels := "variables.podLabels"
	first := "variables.jobKeys[0]"
	pa := "object.spec.?affinity.?podAffinity"
	return []variable{
		{"podLabels", "object.metadata.?labels.orValue({})"},
		// The first of the job labels the pod carries, if any.
		{"jobKeys", firstKeyWhere(contract.JobLabels, func(k string) string { return k + " in " + labels })},
		{"jobSel", "variables.jobKeys.size() == 0 ? {} : " + first + " == " + a(contract.JobLabelLWS) + " && " + a(contract.LWSGroupIndexLabel) + " in " + labels + " ? " +
			"{" + first + ": " + labels + "[" + first + "], " + a(contract.LWSGroupIndexLabel) + ": " + labels + "[" + a(contract.LWSGroupIndexLabel) + "]} : " +
			"{" + first + ": " + labels + "[" + first + "]}"},
		{"jobUIDKeys", "variables.jobKeys.size() == 0 ? [] : " + jobUIDLabels() + "[?" + first + "].orValue([]).filter(k, k in " + labels + ")"},
		{"ownAffinity", pa + ".?requiredDuringSchedulingIgnoredDuringExecution.orValue([]).exists(t, t.topologyKey == " + a(contract.LabelPartition) + ") || " +
			pa + ".?preferredDuringSchedulingIgnoredDuringExecution.orValue([]).exists(w, w.podAffinityTerm.topologyKey == " + a(contract.LabelPartition) + ")"},
		{"jobAffinity", "variables.rdma && variables.jobKeys.size() > 0 && !variables.ownAffinity && " +
			"variables.annos[?" + a(contract.AnnotationPlacement) + "].orValue('') != " + a(contract.PlacementAny)},
	}
}

// jobUIDLabels is contract.JobUIDLabels as a CEL map literal.
func jobUIDLabels() string {
	keys := make([]string, 0, len(contract.JobUIDLabels))
	for k := range contract.JobUIDLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	entries := make([]string, len(keys))
	for i, k := range keys {
		entries[i] = lit(k) + ": " + list(contract.JobUIDLabels[k]...)
	}
	return "{" + strings.Join(entries, ", ") + "}"
}

// ensureJobAffinity is mutate's jobAffinityTerm and patcher.addJobAffinity.
func ensureJobAffinity() string {
	req := "Object.spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution"
	term := req + "{labelSelector: " + req + ".labelSelector{matchLabels: variables.jobSel}, " +
		"?matchLabelKeys: variables.jobUIDKeys.size() == 0 ? optional.none() : optional.of(variables.jobUIDKeys), " +
		"topologyKey: " + lit(contract.LabelPartition) + "}"
	podAff := "Object.spec.affinity.podAffinity{requiredDuringSchedulingIgnoredDuringExecution: [" + term + "]}"
	return "(!variables.jobAffinity ? [] : " +
		"!has(object.spec.affinity) ? [" + jsonPatch("add", "'/spec/affinity'", "Object.spec.affinity{podAffinity: "+podAff+"}") + "] : " +
		"!has(object.spec.affinity.podAffinity) ? [" + jsonPatch("add", "'/spec/affinity/podAffinity'", podAff) + "] : " +
		"!has(object.spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution) ? [" +
		jsonPatch("add", "'/spec/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution'", "["+term+"]") + "] : " +
		"[" + jsonPatch("add", "'/spec/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution/-'", term) + "])"
}

// escape makes s a JSON Pointer reference token (RFC 6901).
func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func mountSkip(c string) string {
	return c + ".?volumeMounts.orValue([]).exists(m, m.name == " + lit(contract.NCCLConfVolume) + " || m.mountPath == " + lit(contract.NCCLConfDir) + ")"
}

func jsonPatch(op, path, value string) string {
	return "JSONPatch{op: " + lit(op) + ", path: " + path + ", value: " + value + "}"
}

// ensureResource is needResource and addResource (package mutate) for
// container c at path t: resource res (esc: its name as a JSON Pointer
// token), count n.
func ensureResource(c, t, res, esc, n string) string {
	return "((" + c + ".?resources.?limits[?" + res + "].hasValue() || " + c + ".?resources.?requests[?" + res + "].hasValue()) ? [] : " +
		"(!has(" + c + ".resources) || (!has(" + c + ".resources.limits) && !has(" + c + ".resources.requests) && !has(" + c + ".resources.claims))) ? " +
		"[" + jsonPatch("add", t+" + '/resources'", "{'limits': {"+res+": "+n+"}, 'requests': {"+res+": "+n+"}}") + "] : " +
		"[has(" + c + ".resources.limits) ? " + jsonPatch("add", t+" + '/resources/limits/' + "+esc, n) + " : " + jsonPatch("add", t+" + '/resources/limits'", "{"+res+": "+n+"}") + ", " +
		"has(" + c + ".resources.requests) ? " + jsonPatch("add", t+" + '/resources/requests/' + "+esc, n) + " : " + jsonPatch("add", t+" + '/resources/requests'", "{"+res+": "+n+"}") + "])"
}

// ensureCapability is the IPC_LOCK of a containerPlan and addCapability.
func ensureCapability(c, t string) string {
	caps := "{'add': ['IPC_LOCK']}"
	return "(!variables.addCap || " + c + ".?securityContext.?capabilities.?add.orValue([]).exists(x, x in ['IPC_LOCK', 'CAP_IPC_LOCK', 'ALL'])) ? [] : " +
		"!has(" + c + ".securityContext) ? [" + jsonPatch("add", t+" + '/securityContext'", "{'capabilities': "+caps+"}") + "] : " +
		"!has(" + c + ".securityContext.capabilities) ? [" + jsonPatch("add", t+" + '/securityContext/capabilities'", caps) + "] : " +
		"!has(" + c + ".securityContext.capabilities.add) ? [" + jsonPatch("add", t+" + '/securityContext/capabilities/add'", "['IPC_LOCK']") + "] : " +
		"[" + jsonPatch("add", t+" + '/securityContext/capabilities/add/-'", "'IPC_LOCK'") + "]"
}

// ensureEnv is needEnv and addEnv: NCCL_CONF_FILE and the profile's other
// variables, where the container does not set them (none of the latter
// with envFrom). The container's names are listed once (names), and a
// container without env gets its list in one operation.
func ensureEnv(c, t string) string {
	adds := "(" + lit(contract.EnvNCCLConfFile) + " in names ? [] : [[" + lit(contract.EnvNCCLConfFile) + ", " + lit(contract.NCCLConfFile) + "]]) + " +
		"(" + c + ".?envFrom.orValue([]).size() > 0 ? [] : variables.profEnv.filter(e, !(e[0] in names)))"
	env := "{'name': e[0], 'value': e[1]}"
	return "[" + c + ".?env.orValue([]).map(e, e.name)].map(names, [" + adds + "].map(adds, adds.size() == 0 ? [] : !has(" + c + ".env) ? " +
		"[" + jsonPatch("add", t+" + '/env'", "adds.map(e, "+env+")") + "] : " +
		"adds.map(e, " + jsonPatch("add", t+" + '/env/-'", env) + "))[0])[0]"
}

// ensureMount is needMount and addMount.
func ensureMount(c, t string) string {
	m := "Object.spec.containers.volumeMounts{name: " + lit(contract.NCCLConfVolume) + ", mountPath: " + lit(contract.NCCLConfDir) + ", readOnly: true}"
	return mountSkip(c) + " ? [] : !has(" + c + ".volumeMounts) ? [" + jsonPatch("add", t+" + '/volumeMounts'", "["+m+"]") + "] : [" + jsonPatch("add", t+" + '/volumeMounts/-'", m) + "]"
}

// containerOps are the operations for target k (index into tgtGPU) at
// container expression c and path expression t.
func containerOps(c, t, k string) string {
	return "(variables.shared ? " + ensureResource(c, t, "params.data.sharedResource", "variables.sharedEsc", "'1'") + " : []) + " +
		"(variables.exclusive ? " + ensureResource(c, t, "variables.exclRes", "variables.exclEsc", "variables.exclCount["+k+"]") + " : []) + " +
		"(" + ensureCapability(c, t) + ") + " + ensureEnv(c, t) + " + (" + ensureMount(c, t) + ")"
}

// mutation is the MutatingAdmissionPolicy's JSON patch: mutate.Mutate's
// steps, each adding only what is missing, so a reinvocation adds nothing.
func mutation() string {
	vol := "Object.spec.volumes{name: " + lit(contract.NCCLConfVolume) + ", downwardAPI: Object.spec.volumes.downwardAPI{items: [Object.spec.volumes.downwardAPI.items{path: " + lit(contract.NCCLConfFileName) +
		", fieldRef: Object.spec.volumes.downwardAPI.items.fieldRef{apiVersion: 'v1', fieldPath: " + lit("metadata.annotations['"+contract.AnnotationNCCLConf+"']") + "}}]}}"
	return "!variables.active ? [] : " +
		"variables.selC.map(i, " + containerOps("object.spec.containers[i]", "'/spec/containers/' + string(i)", "variables.selC.indexOf(i)") + ").flatten() + " +
		"variables.selI.map(i, " + containerOps("variables.inits[i]", "'/spec/initContainers/' + string(i)", "variables.selC.size() + variables.selI.indexOf(i)") + ").flatten() + " +
		"(object.spec.?volumes.orValue([]).exists(v, v.name == " + lit(contract.NCCLConfVolume) + ") || !variables.mountsConf ? [] : " +
		"!has(object.spec.volumes) ? [" + jsonPatch("add", "'/spec/volumes'", "["+vol+"]") + "] : [" + jsonPatch("add", "'/spec/volumes/-'", vol) + "]) + " +
		ensureJobAffinity() + " + " +
		"(variables.annoOps.size() == 0 || has(object.metadata.annotations) ? [] : [" + jsonPatch("add", "'/metadata/annotations'", "{}") + "]) + " +
		"variables.annoOps.map(o, JSONPatch{op: o[0], path: '/metadata/annotations/' + o[1], value: o[2]})"
}

// refusal is the ValidatingAdmissionPolicy's check.
const refusal = "variables.refusal == ''"
