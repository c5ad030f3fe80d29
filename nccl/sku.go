package nccl

import (
	"regexp"
	"strings"
)

// skuRule maps a node's instance type (the node.kubernetes.io/instance-type
// label) to a built-in profile.
type skuRule struct {
	pattern *regexp.Regexp
	profile string
}

// skuRules is read-only after package init; regexps are safe for concurrent use.
var skuRules = []skuRule{
	// Azure ND A100 v4 sizes: Standard_ND96asr_v4, Standard_ND96amsr_A100_v4
	// (learn.microsoft.com nda100-v4-series, ndm-a100-v4-series).
	{regexp.MustCompile(`(?i)^standard_nd96a[m]?sr(_a100)?_v4$`), NDv4},
	// Azure ND H100 v5 and ND H200 v5: Standard_ND96isr_H100_v5,
	// Standard_ND96isr_H200_v5. Azure/azhpc-images
	// components/setup_sku_customizations.sh gives both the ndv5 family with
	// the pattern standard_nd96is*_h[1-2]00_v5.
	{regexp.MustCompile(`(?i)^standard_nd96is[a-z]*_h[12]00_v5$`), NDv5},
	// Azure ND MI300X v5: Standard_ND96isr_MI300X_v5 (the same script's AMD
	// branch: standard_nd96is*_mi300x_v5).
	{regexp.MustCompile(`(?i)^standard_nd96is[a-z]*_mi300x_v5$`), NDv5MI300X},
	// Azure ND GB200 v6 and ND GB300 v6: Standard_ND128isr_NDR_GB200_v6,
	// Standard_ND128isr_GB300_v6 (the same script: standard_nd128is*_gb[2-3]00_v6).
	{regexp.MustCompile(`(?i)^standard_nd128is[a-z_]*_gb[23]00_v6$`), NDv6GB},
	// Azure HB-series: Standard_HB120rs_v2, _v3, Standard_HB176rs_v4 and the
	// constrained-core variants such as Standard_HB120-32rs_v3.
	{regexp.MustCompile(`(?i)^standard_hb[0-9]+(-[0-9]+)?rs(_v[0-9]+)?$`), HB},
	// OCI bare-metal GPU shapes, as oci-hpc-oke
	// docs/recommended-nccl-rccl-parameters-by-shape.md names them.
	{regexp.MustCompile(`(?i)^bm\.gpu\.h100\.8$`), OCIH100RoCE},
	{regexp.MustCompile(`(?i)^bm\.gpu\.h200\.8$`), OCIH200RoCE},
	{regexp.MustCompile(`(?i)^bm\.gpu\.b4\.8$`), OCIB4RoCE},
}

// ProfileForSKU returns the built-in profile for a node's instance type, such
// as "Standard_ND96isr_H100_v5" or "BM.GPU.H100.8".
func ProfileForSKU(sku string) (Profile, bool) {
	sku = strings.TrimSpace(sku)
	for _, r := range skuRules {
		if !r.pattern.MatchString(sku) {
			continue
		}
		for _, p := range Builtin() {
			if p.Name == r.profile {
				return p, true
			}
		}
	}
	return Profile{}, false
}
