package counters

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// labelValue is s as a Prometheus label value. HCA and hw_counters names
// come from the kernel and the driver as bytes, and a label value must be
// valid UTF-8 (the exposition format's rule; client_golang refuses the
// metric otherwise), so each byte that is not part of a valid UTF-8
// sequence is written as \xNN, keeping distinct names distinct and
// readable.
func labelValue(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n <= 1 {
			fmt.Fprintf(&b, `\x%02x`, s[0])
			s = s[1:]
			continue
		}
		b.WriteString(s[:n])
		s = s[n:]
	}
	return b.String()
}

// constMetric is one sample with its label values made valid. A metric
// that still cannot be built is handed on as an invalid metric, which the
// registry reports on its own, so the rest of the scrape is kept.
func constMetric(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) prometheus.Metric {
	for i, l := range labels {
		labels[i] = labelValue(l)
	}
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}
