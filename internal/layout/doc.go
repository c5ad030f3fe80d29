// Package layout holds the tests that keep the tree in the shape the
// README's Layout section describes: the import graph reads top down
// (between rooms, and inside node/ and webhook/ in the order the README
// lists), the core packages' functions stay small, and the lists contract
// and nccl own are not written out again elsewhere. It has no code of its
// own.
package layout
