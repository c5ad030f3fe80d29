package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPortCanBeServed: the port picked is one a server can then bind.
func TestPortCanBeServed(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{Addr(t), "127.0.0.1:" + strconv.Itoa(Port(t))} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen on the picked %s: %v", addr, err)
		}
		l.Close()
	}
}
