//go:build tools

// Package tools pins Multus (the thin CNI plugin) for the multi-node e2e
// cluster (see hack/make/e2e.mk, target multus).
package tools

import (
	_ "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus"
)
