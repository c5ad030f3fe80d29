// Package version carries the ibkube version stamped at build time.
package version

// Version is set with -ldflags "-X github.com/ibkube/ibkube/internal/version.Version=...".
// It is a variable only because the linker can set nothing else.
var Version = "dev"
