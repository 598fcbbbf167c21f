package main

import (
	"bytes"
	"io"
	"net"
	"testing"

	"github.com/fulcrum-lb/fulcrum/bench/proxy/evloop/relay/relaytest"
)

func TestProxiesGetAndPost(t *testing.T) {
	for _, wait := range []string{"block", "netpoll"} {
		t.Run(wait, func(t *testing.T) {
			ups := relaytest.Upstreams(t, 2)
			// One loop: the client and every upstream connection on it,
			// so round robin is observable over one client connection.
			// The loop outlives the test (the process ends with it).
			addr, err := Start("127.0.0.1:0", ups, 1, wait == "netpoll")
			if err != nil {
				t.Fatal(err)
			}
			relaytest.Exchange(t, addr)
		})
	}
}

// TestNoAllocationsPerRequest: once its connections and buffers exist, a
// proxied request allocates nothing in the loop. The client and the
// upstream are raw loopback sockets with fixed buffers, so what the
// process allocates per request is the loop's.
func TestNoAllocationsPerRequest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { // one request per read: the loop writes each head in one write
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	for _, wait := range []string{"block", "netpoll"} {
		t.Run(wait, func(t *testing.T) {
			addr, err := Start("127.0.0.1:0", []string{ln.Addr().String()}, 1, wait == "netpoll")
			if err != nil {
				t.Fatal(err)
			}
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			req := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			want := []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			got := make([]byte, len(want))
			var failed error
			one := func() {
				if _, err := c.Write(req); err != nil {
					failed = err
					return
				}
				if _, err := io.ReadFull(c, got); err != nil {
					failed = err
				}
			}
			one() // dials the upstream connection
			if failed != nil || !bytes.Equal(got, want) {
				t.Fatalf("first response %q, %v; want %q", got, failed, want)
			}
			if n := testing.AllocsPerRun(1000, one); n != 0 || failed != nil {
				t.Fatalf("%v allocations per request (err %v), want 0", n, failed)
			}
		})
	}
}
