// Package chart holds the Helm chart's tests. Those that run helm or an API
// server carry build tags chart and integration (see render_test.go); those
// that read the golden renders only (contract_test.go) run untagged.
package chart
