//go:build tools

// Package tools pins staticcheck (see hack/make/tools.mk, target staticcheck).
package tools

import _ "honnef.co/go/tools/cmd/staticcheck"
