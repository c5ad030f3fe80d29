//go:build tools

// Package tools pins helm (see hack/make/tools.mk, target helm).
package tools

import _ "helm.sh/helm/v3/cmd/helm"
