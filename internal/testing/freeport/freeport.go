// Package freeport picks a loopback port for a server that a test starts
// in another process (a real binary given --port or --metrics-bind-address).
// The port is free when chosen and the child binds it moments later; a
// server in the test's own process serves on a listener the test keeps
// open instead, so that nothing can take the port in between.
package freeport

import (
	"net"
	"testing"
)

// Addr is a free 127.0.0.1 address, "127.0.0.1:PORT".
func Addr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("pick a free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Port is the port of a free 127.0.0.1 address.
func Port(tb testing.TB) int {
	tb.Helper()
	addr, err := net.ResolveTCPAddr("tcp", Addr(tb))
	if err != nil {
		tb.Fatal(err)
	}
	return addr.Port
}
