//go:build tools

// Package tools pins containerd, ctr and the runc shim for the e2e node
// (see hack/make/tools.mk, target containerd).
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
