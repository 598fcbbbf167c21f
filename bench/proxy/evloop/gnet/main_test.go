package main

import (
	"context"
	"net"
	"testing"

	"github.com/panjf2000/gnet/v2"

	"github.com/fulcrum-lb/fulcrum/bench/proxy/evloop/relay/relaytest"
)

func TestProxiesGetAndPost(t *testing.T) {
	ups := relaytest.Upstreams(t, 2)
	p, err := New(ups)
	if err != nil {
		t.Fatal(err)
	}
	// gnet binds each loop's SO_REUSEPORT listener itself, so port 0
	// would give each its own port: take a free one first.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	done := make(chan error, 1)
	go func() { done <- p.Run(addr, 1) }()
	t.Cleanup(func() {
		if err := gnet.Stop(context.Background(), "tcp://"+addr); err != nil {
			t.Errorf("stop: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	relaytest.WaitUp(t, addr)
	relaytest.Exchange(t, addr)
}
