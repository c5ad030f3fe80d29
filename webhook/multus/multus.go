// Package multus reads and edits the Multus network-selection annotation
// (k8s.v1.cni.cncf.io/networks) the way Multus itself reads it, for the
// webhook and the CLI.
//
// The annotation comes in two forms (NPWG multi-net spec, section 4.1.2):
//
//	CSV:  "ibkube-system/ibkube-ipoib@net1, other"   ([namespace/]name[@interface], comma separated)
//	JSON: [{"name":"ibkube-ipoib","namespace":"ibkube-system","interface":"net1"}]
//
// Merge adds networks without ever rewriting what the user wrote: the user's
// entries keep their order, their bytes and their options, a network that is
// already named (same namespace and name) is not added again, and the result
// is written back in the form it came in. Nothing here does I/O.
package multus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
)

// Annotation is the pod annotation Multus reads the extra networks from.
const Annotation = nadv1.NetworkAttachmentAnnot

// Network is one network attachment: the NetworkAttachmentDefinition
// namespace/name and the interface name requested in the pod. An empty
// Namespace means the pod's namespace; an empty Interface lets Multus pick
// (net1, net2, ...).
type Network struct {
	Namespace, Name, Interface string
}

// String renders n in the annotation's CSV syntax: [namespace/]name[@interface].
func (n Network) String() string {
	var b strings.Builder
	if n.Namespace != "" {
		b.WriteString(n.Namespace)
		b.WriteByte('/')
	}
	b.WriteString(n.Name)
	if n.Interface != "" {
		b.WriteByte('@')
		b.WriteString(n.Interface)
	}
	return b.String()
}

// key is the identity of a network: its NAD, with the namespace resolved.
func (n Network) key(podNamespace string) string {
	ns := n.Namespace
	if ns == "" {
		ns = podNamespace
	}
	return ns + "/" + n.Name
}

// Form is how an annotation value is written.
type Form int

const (
	// FormEmpty is an absent or blank value; Merge writes CSV into it.
	FormEmpty Form = iota
	// FormCSV is "[namespace/]name[@interface], ...".
	FormCSV
	// FormJSON is a JSON list of NetworkSelectionElement objects.
	FormJSON
)

// DetectForm tells how value is written, the way Multus decides it: any of
// '[', '{' or '"' makes it JSON.
func DetectForm(value string) Form {
	switch {
	case strings.TrimSpace(value) == "":
		return FormEmpty
	case strings.ContainsAny(value, `[{"`):
		return FormJSON
	default:
		return FormCSV
	}
}

// Accepted describes the accepted syntax; it ends every FormatError.
const Accepted = `accepted: a comma-separated list of [namespace/]name[@interface] ` +
	`(each part a lower-case DNS label, e.g. "ibkube-system/ibkube-ipoib@net1, other-net"), ` +
	`or a JSON list of objects with "name" and optional "namespace", "interface", "ips", "mac", ... ` +
	`(e.g. [{"name":"ibkube-ipoib","namespace":"ibkube-system","interface":"net1"}])`

// FormatError is a malformed annotation value (or a network that cannot be
// written into one). Its message names the entry, what is wrong with it and
// what is accepted, so the webhook can hand it to the user as is.
type FormatError struct {
	// Entry is the 1-based position of the offending entry; 0 when the
	// value as a whole is wrong.
	Entry  int
	Text   string
	Reason string
}

func (e *FormatError) Error() string {
	var b strings.Builder
	b.WriteString("annotation " + Annotation)
	if e.Entry > 0 {
		fmt.Fprintf(&b, " entry %d", e.Entry)
	}
	if e.Text != "" {
		fmt.Fprintf(&b, " %q", truncate(e.Text, 120))
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	b.WriteString("; ")
	b.WriteString(Accepted)
	return b.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// ConflictError is an added network whose interface name is already taken
// by another network in the annotation; Multus would fail the pod sandbox.
type ConflictError struct {
	Add      Network
	Existing Network
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("annotation %s: cannot add network %s: interface %q is already requested for network %s; "+
		"rename one of the interfaces", Annotation, e.Add, e.Add.Interface, e.Existing)
}

// dnsLabel is the syntax Multus requires of each CSV part
// (k8snetworkplumbingwg/network-attachment-definition-client pkg/utils).
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// maxIfName is IFNAMSIZ-1: the longest Linux interface name.
const maxIfName = 15

// element is one parsed entry, with the bytes it was written as (JSON form).
type element struct {
	Network
	raw []byte
}

// Selection is a parsed annotation value that remembers its form and the
// user's exact text, so that it can be written back unchanged.
type Selection struct {
	Form     Form
	value    string
	elements []element
}

// ParseSelection parses an annotation value. Namespaces stay as written
// (empty when the entry names none).
func ParseSelection(value string) (*Selection, error) {
	s := &Selection{Form: DetectForm(value), value: value}
	switch s.Form {
	case FormCSV:
		for i, item := range strings.Split(value, ",") {
			n, err := parseCSVItem(item)
			if err != nil {
				return nil, &FormatError{Entry: i + 1, Text: strings.TrimSpace(item), Reason: err.Error()}
			}
			s.elements = append(s.elements, element{Network: n})
		}
	case FormJSON:
		var raws []json.RawMessage
		if err := json.Unmarshal([]byte(value), &raws); err != nil {
			return nil, &FormatError{Text: value, Reason: "not a JSON list: " + err.Error()}
		}
		if raws == nil {
			return nil, &FormatError{Text: value, Reason: "JSON null is not a list of networks"}
		}
		for i, raw := range raws {
			n, err := parseJSONElement(raw)
			if err != nil {
				return nil, &FormatError{Entry: i + 1, Text: string(raw), Reason: err.Error()}
			}
			s.elements = append(s.elements, element{Network: n, raw: raw})
		}
	}
	return s, nil
}

func parseCSVItem(item string) (Network, error) {
	item = strings.TrimSpace(item)
	if item == "" {
		return Network{}, fmt.Errorf("empty entry (a stray comma?)")
	}
	var n Network
	rest := item
	if ns, after, found := strings.Cut(rest, "/"); found {
		if strings.Contains(after, "/") {
			return Network{}, fmt.Errorf("more than one '/'")
		}
		n.Namespace, rest = strings.TrimSpace(ns), after
		if n.Namespace == "" {
			return Network{}, fmt.Errorf("empty namespace before '/'")
		}
	}
	name, iface, found := strings.Cut(rest, "@")
	if found && strings.Contains(iface, "@") {
		return Network{}, fmt.Errorf("more than one '@'")
	}
	n.Name, n.Interface = strings.TrimSpace(name), strings.TrimSpace(iface)
	if found && n.Interface == "" {
		return Network{}, fmt.Errorf("empty interface name after '@'")
	}
	if err := n.validate(true); err != nil {
		return Network{}, err
	}
	return n, nil
}

// validate checks n's parts; csv adds Multus's DNS-label rule for the CSV form.
func (n Network) validate(csv bool) error {
	if n.Name == "" {
		return fmt.Errorf("network name is empty")
	}
	if csv {
		for _, p := range []struct{ what, v string }{
			{"namespace", n.Namespace}, {"network name", n.Name}, {"interface name", n.Interface},
		} {
			if p.v != "" && !dnsLabel.MatchString(p.v) {
				return fmt.Errorf("%s %q is not a lower-case DNS label ([a-z0-9], '-' inside)", p.what, p.v)
			}
		}
	}
	if len(n.Interface) > maxIfName {
		return fmt.Errorf("interface name %q is longer than %d characters", n.Interface, maxIfName)
	}
	if strings.ContainsAny(n.Interface, "/ \t\n:") {
		return fmt.Errorf("interface name %q contains '/', ':' or white space", n.Interface)
	}
	return nil
}

func parseJSONElement(raw json.RawMessage) (Network, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return Network{}, fmt.Errorf("not a JSON object")
	}
	var e nadv1.NetworkSelectionElement
	if err := json.Unmarshal(raw, &e); err != nil {
		return Network{}, fmt.Errorf("invalid network selection element: %w", err)
	}
	n := Network{Namespace: e.Namespace, Name: e.Name, Interface: e.InterfaceRequest}
	if err := n.validate(false); err != nil {
		return Network{}, err
	}
	return n, nil
}

// Networks returns the entries as written (Namespace empty where the entry
// names none), in order.
func (s *Selection) Networks() []Network {
	if len(s.elements) == 0 {
		return nil
	}
	out := make([]Network, len(s.elements))
	for i, e := range s.elements {
		out[i] = e.Network
	}
	return out
}

// Parse returns the networks an annotation value selects, in order, with
// empty namespaces resolved to podNamespace. A blank value selects none.
func Parse(value, podNamespace string) ([]Network, error) {
	s, err := ParseSelection(value)
	if err != nil {
		return nil, err
	}
	out := s.Networks()
	for i := range out {
		if out[i].Namespace == "" {
			out[i].Namespace = podNamespace
		}
	}
	return out, nil
}

// Merge adds networks to an annotation value (existing may be empty).
//
// An added network that the value already selects (same namespace and name,
// an empty namespace meaning podNamespace) is not added again, whatever
// interface either names: the user's entry, with its interface and
// options, wins. Asking for the same network twice (one attachment per HCA)
// needs as many entries: entries with the same interface name pair up first,
// then any remaining ones. This makes Merge idempotent, so a webhook
// reinvocation or an UPDATE never duplicates a network (spiderpool issue
// 5099). New entries are appended after the user's, in add's order, in the
// value's form (CSV for a blank value). The user's text is kept byte for
// byte. changed is false, and value == existing, when nothing was added.
//
// A malformed existing value is a *FormatError; an added network whose
// interface is already requested for another network is a *ConflictError.
func Merge(existing string, add []Network, podNamespace string) (value string, changed bool, err error) {
	s, err := ParseSelection(existing)
	if err != nil {
		return existing, false, err
	}
	for _, a := range add {
		if err := a.validate(true); err != nil {
			return existing, false, fmt.Errorf("network to add %q: %w", a.String(), err)
		}
	}

	added, err := missing(s.elements, add, podNamespace)
	if err != nil {
		return existing, false, err
	}
	if len(added) == 0 {
		return existing, false, nil
	}
	return s.appendNetworks(added), true, nil
}

// present says, for each network to add, whether the selection already
// holds it. Entries with the same NAD and the same interface pair first,
// so that a second Merge finds exactly what the first one added.
func present(elements []element, add []Network, podNamespace string) []bool {
	matched := make([]bool, len(elements))
	found := make([]bool, len(add))
	for _, exact := range []bool{true, false} {
		for i, a := range add {
			if found[i] {
				continue
			}
			for j, e := range elements {
				if matched[j] || e.key(podNamespace) != a.key(podNamespace) {
					continue
				}
				if exact && e.Interface != a.Interface {
					continue
				}
				matched[j], found[i] = true, true
				break
			}
		}
	}
	return found
}

// missing lists the networks of add the selection lacks, or a
// *ConflictError when one asks for an interface name another network
// already holds.
func missing(elements []element, add []Network, podNamespace string) ([]Network, error) {
	have := present(elements, add, podNamespace)
	taken := map[string]Network{}
	for _, e := range elements {
		if e.Interface != "" {
			taken[e.Interface] = e.Network
		}
	}
	var added []Network
	for i, a := range add {
		if have[i] {
			continue
		}
		if a.Interface != "" {
			if other, ok := taken[a.Interface]; ok {
				return nil, &ConflictError{Add: a, Existing: other}
			}
			taken[a.Interface] = a
		}
		added = append(added, a)
	}
	return added, nil
}

// appendNetworks writes added after the user's text, in the user's form.
func (s *Selection) appendNetworks(added []Network) string {
	if s.Form == FormJSON {
		parts := make([]string, len(added))
		for i, n := range added {
			b, _ := json.Marshal(nadv1.NetworkSelectionElement{
				Name: n.Name, Namespace: n.Namespace, InterfaceRequest: n.Interface,
			}) // a struct of strings always marshals
			parts[i] = string(b)
		}
		// Insert before the closing bracket so every byte the user wrote,
		// white space and unknown fields included, stays where it was.
		end := strings.LastIndexByte(s.value, ']')
		head := strings.TrimRight(s.value[:end], " \t\r\n")
		sep := ","
		if len(s.elements) == 0 {
			sep = ""
		}
		return head + sep + strings.Join(parts, ",") + s.value[end:]
	}
	parts := make([]string, len(added))
	for i, n := range added {
		parts[i] = n.String()
	}
	if s.Form == FormEmpty {
		return strings.Join(parts, ", ")
	}
	return strings.TrimSpace(s.value) + ", " + strings.Join(parts, ", ")
}
