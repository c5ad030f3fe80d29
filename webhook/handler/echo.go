package handler

import "github.com/ibkube/ibkube/webhook/mutate"

// maxUIDBytes bounds the request uid. The API server sends a UUID (36
// bytes) and checks that the answer carries the same one, so a longer uid
// cannot be cut: such a review is refused whole.
const maxUIDBytes = 128

// clip cuts what an answer or a log line repeats of a request field to
// webhook/mutate's bound on echoed pod values: a forged review may put
// megabytes in any of them, and each would come back in the answer and the
// log line.
func clip(s string) string {
	return mutate.Clip(s)
}
