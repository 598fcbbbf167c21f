//go:build !unix

package gateway_test

import (
	"net"
	"testing"
)

// refusingAddr returns a loopback port that was free a moment ago
// (refuse_unix_test.go holds it instead, where it can).
func refusingAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
