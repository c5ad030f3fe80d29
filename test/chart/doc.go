// Package chart holds the Helm chart's tests (build tags chart and
// integration); see render_test.go.
package chart
