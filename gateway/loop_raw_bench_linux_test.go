package gateway

import (
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkLoopbackRoundTrip is four socket calls on one thread over a
// loopback TCP pair (a writes, b reads, b writes, a reads), the calls a
// proxied request makes: through the file layer (read/write) and as the
// loop makes them (recvfrom/sendto). Nothing waits, so ns/op is CPU.
//
//	go test -run '^$' -bench LoopbackRoundTrip -count 8 ./gateway/
func BenchmarkLoopbackRoundTrip(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	ca, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer ca.Close()
	cb := <-accepted
	if cb == nil {
		b.Fatal("accept failed")
	}
	defer cb.Close()
	fd := func(c net.Conn) int {
		f, err := c.(*net.TCPConn).File() // a blocking duplicate; made non-blocking below
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		n := int(f.Fd())
		if err := unix.SetNonblock(n, true); err != nil {
			b.Fatal(err)
		}
		return n
	}
	fa, fb := fd(ca), fd(cb)
	msg, buf := make([]byte, 200), make([]byte, 16<<10)
	run := func(b *testing.B, read func(int, []byte) (int, error), write func(int, []byte) (int, error)) {
		for b.Loop() {
			for _, s := range [][2]int{{fa, fb}, {fb, fa}} {
				if n, err := write(s[0], msg); n != len(msg) {
					b.Fatal(n, err)
				}
				if n, err := read(s[1], buf); n != len(msg) {
					b.Fatal(n, err)
				}
			}
		}
	}
	// read and write as raw syscalls too, so that only the call differs
	fileRead := func(fd int, p []byte) (int, error) {
		r, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(bufPtr(p)), uintptr(len(p)))
		if e != 0 {
			return -1, e
		}
		return int(r), nil
	}
	fileWrite := func(fd int, p []byte) (int, error) {
		r, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(bufPtr(p)), uintptr(len(p)))
		if e != 0 {
			return -1, e
		}
		return int(r), nil
	}
	b.Run("read-write", func(b *testing.B) { run(b, fileRead, fileWrite) })
	b.Run("recvfrom-sendto", func(b *testing.B) { run(b, rawRead, rawWrite) })
}
