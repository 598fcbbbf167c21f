//go:build unix

package gateway_test

import (
	"fmt"
	"syscall"
	"testing"
)

// refusingAddr returns a loopback address that refuses connections for
// the rest of the test: a TCP socket bound to it that never listens.
// Holding the port matters: a port taken and given back can be handed
// to the next listener on port 0, and a gateway that got its own dead
// target's port proxied to itself until the retry budget ran out (a
// flake once in many runs, "502 Bad Gateway: budget").
func refusingAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.CloseOnExec(fd)
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}
