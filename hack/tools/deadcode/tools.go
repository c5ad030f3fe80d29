//go:build tools

// Package tools pins deadcode (see hack/make/tools.mk, target deadcode).
package tools

import _ "golang.org/x/tools/cmd/deadcode"
