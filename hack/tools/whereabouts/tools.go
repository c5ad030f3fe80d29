//go:build tools

// Package tools pins whereabouts (the cluster-wide IPAM CNI plugin) for the
// multi-node e2e cluster (see hack/make/e2e.mk, target whereabouts).
package tools

import (
	_ "github.com/k8snetworkplumbingwg/whereabouts/cmd"
)
