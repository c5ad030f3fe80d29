package server

import "net/http"

// count is how many followed connections are in state st: what the tests
// wait on (the server itself never needs the figure).
func (t *connTable) count(st http.ConnState) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, e := range t.conns {
		if e.state == st {
			n++
		}
	}
	return n
}
