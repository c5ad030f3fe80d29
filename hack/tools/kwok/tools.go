//go:build tools

// Package tools pins KWOK (see hack/make/fleet.mk, target kwok), which
// simulates the fleet's nodes and their pods against the real control plane
// of make fleet.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
