package handler

import (
	"fmt"
	"unicode/utf8"
)

// maxEcho bounds what an answer or a log line repeats of a request field
// (uid, kind, namespace, name, a header): a forged review may put megabytes
// in any of them, and each would come back in the answer and the log line.
// It is webhook/mutate's bound on echoed pod values.
const maxEcho = 256

// maxUIDBytes bounds the request uid. The API server sends a UUID (36
// bytes) and checks that the answer carries the same one, so a longer uid
// cannot be cut: such a review is refused whole.
const maxUIDBytes = 128

// clip cuts s to maxEcho bytes (on a UTF-8 boundary) plus a marker naming
// how many bytes were left out.
func clip(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("...[%d more bytes]", len(s)-cut)
}
