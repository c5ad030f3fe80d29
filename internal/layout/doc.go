// Package layout holds the test that keeps the import graph in the shape the
// README's Layout section describes. It has no code of its own.
package layout
