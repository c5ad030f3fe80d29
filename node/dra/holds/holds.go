// Package holds is the record of which HCAs each claim prepared by the DRA
// driver holds. The record lives in the claim's CDI spec file (its name
// and annotations): node/dra writes it in Prepare, and Prepare's checks,
// the agent's start and `ibkube doctor` read it back. The package links no
// API client, so the offline CLI reads the same record the agent does.
package holds

import (
	"slices"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/node/dra/slice"
	"github.com/ibkube/ibkube/node/resource"
)

// Annotations of a claim's CDI spec that record its holds.
const (
	// AnnotationExclusive and AnnotationShared list the HCAs the claim
	// holds exclusively and as a sharer, so that Prepare refuses an HCA
	// one claim holds exclusively to any other. Admin-access requests hold
	// nothing: the API lets them reach devices in use.
	AnnotationExclusive = contract.DRADriverName + "/exclusive-hcas"
	AnnotationShared    = contract.DRADriverName + "/shared-hcas"
	// AnnotationLegacyExclusive is what agents before HCA-level holds
	// wrote: the exclusive devices by name ("ib-mlx5-0"). Still read, so
	// that an upgraded agent keeps the holds of running pods.
	AnnotationLegacyExclusive = contract.DRADriverName + "/exclusive-devices"
)

// Holds are the HCAs one claim holds, by kernel name, sorted.
type Holds struct {
	Exclusive, Shared []string
	// LegacyDevices are exclusive devices by name, from a spec an older
	// agent wrote; ExclusiveHCAs resolves them to HCAs.
	LegacyDevices []string
}

// Annotate records h in a spec's annotations.
func (h Holds) Annotate(annotations map[string]string) {
	for key, hcas := range map[string][]string{AnnotationExclusive: h.Exclusive, AnnotationShared: h.Shared} {
		if len(hcas) > 0 {
			annotations[key] = strings.Join(hcas, ",")
		}
	}
}

// FromSpec reads the holds a spec records.
func FromSpec(spec *cdispec.Spec) Holds {
	return Holds{
		Exclusive:     splitList(spec.Annotations[AnnotationExclusive]),
		Shared:        splitList(spec.Annotations[AnnotationShared]),
		LegacyDevices: splitList(spec.Annotations[AnnotationLegacyExclusive]),
	}
}

func splitList(s string) []string {
	var out []string
	for _, it := range strings.Split(s, ",") {
		if it != "" {
			out = append(out, it)
		}
	}
	return out
}

// ExclusiveHCAs are the HCAs the claim holds exclusively, its legacy
// device-named holds resolved through m (a device m does not publish is
// left out: its HCA is gone or no longer in a pool).
func (h Holds) ExclusiveHCAs(m *resource.Model) []string {
	out := slices.Clone(h.Exclusive)
	for _, name := range h.LegacyDevices {
		if dev, err := slice.Lookup(m, name); err == nil && !slices.Contains(out, dev.HCA.Name) {
			out = append(out, dev.HCA.Name)
		}
	}
	return out
}
