// Package layout holds the tests that keep the tree in the shape the
// README's Layout section describes: the import graph reads top down, and
// the core packages' functions stay small. It has no code of its own.
package layout
