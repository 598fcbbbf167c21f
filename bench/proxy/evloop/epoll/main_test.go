package main

import (
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
