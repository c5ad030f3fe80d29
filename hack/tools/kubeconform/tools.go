//go:build tools

// Package tools pins kubeconform (see hack/make/tools.mk, target kubeconform).
package tools

import _ "github.com/yannh/kubeconform/cmd/kubeconform"
