package discovery

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/gateway/discovery/discoverytest"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

func dnsBlock(server, name, typ string, port int) config.DNSDiscovery {
	return config.DNSDiscovery{Name: name, Type: typ, Port: port, Server: server,
		Refresh: config.Duration(50 * time.Millisecond), Timeout: config.Duration(time.Second)}
}

func TestDNSARecords(t *testing.T) {
	srv := discoverytest.StartDNS(t)
	srv.Set(t, "api.test. 5 IN A 127.0.0.2", "api.test. 5 IN A 127.0.0.1", "api.test. 5 IN AAAA ::1")
	log, logs := newLog()
	p, err := NewDNS(dnsBlock(srv.Addr, "api.test", "A", 8080), log)
	if err != nil {
		t.Fatal(err)
	}
	r := watch(t, p)
	r.await(t, "http://127.0.0.1:8080 w=1, http://127.0.0.2:8080 w=1, http://[::1]:8080 w=1")

	// A record goes: the list shrinks.
	srv.Set(t, "api.test. 5 IN A 127.0.0.1")
	r.await(t, "http://127.0.0.1:8080 w=1")

	// The server fails, then the name vanishes: the last good list stays
	// (nothing is sent) while resolution goes on.
	sent := r.updates()
	srv.Fail(dns.RcodeServerFailure)
	q := srv.Queries()
	testenv.Eventually(t, "two more refreshes", func() bool { return srv.Queries() >= q+4 })
	srv.Fail(0)
	srv.Set(t)
	q = srv.Queries()
	testenv.Eventually(t, "two more refreshes", func() bool { return srv.Queries() >= q+4 })
	if r.updates() != sent {
		t.Fatalf("a failing resolution sent a list: %s", r.last())
	}
	// One outage (SERVFAIL, then no such name): logged once, with the
	// error that began it; the recovery once.
	if !strings.Contains(logs.String(), "SERVFAIL") || strings.Count(logs.String(), "source unavailable") != 1 {
		t.Fatalf("the outage not logged once:\n%s", logs)
	}
	srv.Set(t, "api.test. 5 IN A 127.0.0.3")
	r.await(t, "http://127.0.0.3:8080 w=1")
	testenv.Eventually(t, "the recovery logged", func() bool { return strings.Contains(logs.String(), "source answers again") })
}

func TestDNSSRVRecords(t *testing.T) {
	srv := discoverytest.StartDNS(t)
	srv.Set(t,
		"_http._tcp.api.test. 5 IN SRV 10 5 9001 a.api.test.",
		"_http._tcp.api.test. 5 IN SRV 10 0 9002 b.api.test.",
		"_http._tcp.api.test. 5 IN SRV 20 9 9003 backup.api.test.",
		"a.api.test. 5 IN A 127.0.0.1",
		"b.api.test. 5 IN A 127.0.0.2",
		"backup.api.test. 5 IN A 127.0.0.9",
	)
	p, err := NewDNS(dnsBlock(srv.Addr, "_http._tcp.api.test", "SRV", 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.log = newLogDiscard()
	r := watch(t, p)
	// Ports and weights from the records; weight 0 counts as 1; the
	// priority-20 backup is left out while priority 10 has records.
	r.await(t, "http://127.0.0.1:9001 w=5, http://127.0.0.2:9002 w=1")

	srv.Set(t,
		"_http._tcp.api.test. 5 IN SRV 10 7 9001 a.api.test.",
		"a.api.test. 5 IN A 127.0.0.1",
	)
	r.await(t, "http://127.0.0.1:9001 w=7")
}

func TestCheckRequire(t *testing.T) {
	srv := discoverytest.StartDNS(t)
	srv.Set(t, "ok.test. 5 IN A 127.0.0.1")
	yaml := `
upstreams:
  good:
    discovery:
      dns: {name: ok.test, port: 80, server: "` + srv.Addr + `", require: true}
  lax:
    discovery:
      dns: {name: missing.test, port: 80, server: "` + srv.Addr + `"}
  strict:
    discovery:
      dns: {name: missing.test, port: 80, server: "` + srv.Addr + `", require: true}
routes:
  - upstream: good
`
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	err = Check(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "upstreams.strict.discovery.dns") || strings.Contains(err.Error(), "lax") || strings.Contains(err.Error(), "good") {
		t.Fatalf("Check = %v, want an error for strict only", err)
	}
	srv.Set(t, "ok.test. 5 IN A 127.0.0.1", "missing.test. 5 IN A 127.0.0.2")
	if err := Check(context.Background(), cfg); err != nil {
		t.Fatalf("Check after the name appeared: %v", err)
	}
}

// One address family failing fails the lookup: the other family's targets
// must not drain on half an answer.
func TestDNSHalfAnswerIsAFailure(t *testing.T) {
	srv := discoverytest.StartDNS(t)
	srv.Set(t, "api.test. 5 IN A 127.0.0.1", "api.test. 5 IN AAAA ::1")
	p, err := NewDNS(dnsBlock(srv.Addr, "api.test", "A", 80), newLogDiscard())
	if err != nil {
		t.Fatal(err)
	}
	if ts, err := p.Lookup(t.Context()); err != nil || short(ts) != "http://127.0.0.1:80 w=1, http://[::1]:80 w=1" {
		t.Fatalf("Lookup = %s, %v", short(ts), err)
	}
	srv.FailType(dns.TypeAAAA, dns.RcodeServerFailure)
	if ts, err := p.Lookup(t.Context()); err == nil {
		t.Fatalf("AAAA failing: Lookup = %s, want an error", short(ts))
	}
}

// A record's TTL shorter than refresh brings the next resolution forward,
// as a resolver honouring TTLs would: with refresh at an hour and records
// of TTL 1, a changed record is seen within seconds.
func TestDNSHonoursShortTTL(t *testing.T) {
	srv := discoverytest.StartDNS(t)
	srv.Set(t, "api.test. 1 IN A 127.0.0.1")
	b := dnsBlock(srv.Addr, "api.test", "A", 8080)
	b.Refresh = config.Duration(time.Hour)
	p, err := NewDNS(b, newLogDiscard())
	if err != nil {
		t.Fatal(err)
	}
	r := watch(t, p)
	r.await(t, "http://127.0.0.1:8080 w=1")
	srv.Set(t, "api.test. 1 IN A 127.0.0.2")
	r.await(t, "http://127.0.0.2:8080 w=1")
}

// A name that is an alias resolves to its target's addresses: the
// resolver answers with the CNAME and the target's A records, whose owner
// is the target, not the name asked for.
func TestDNSFollowsCNAME(t *testing.T) {
	srv := discoverytest.StartDNS(t)
	srv.Set(t, "www.test. 5 IN CNAME edge.test.", "edge.test. 5 IN CNAME api.test.", "api.test. 5 IN A 127.0.0.7")
	p, err := NewDNS(dnsBlock(srv.Addr, "www.test", "A", 8080), newLogDiscard())
	if err != nil {
		t.Fatal(err)
	}
	ts, err := p.Lookup(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := short(ts); got != "http://127.0.0.7:8080 w=1" {
		t.Fatalf("targets %s", got)
	}
}

func TestNextWait(t *testing.T) {
	s, ms := time.Second, time.Millisecond
	for _, tc := range []struct{ refresh, ttl, want time.Duration }{
		{30 * s, -1, 30 * s},      // no good answer yet
		{30 * s, 5 * s, 5 * s},    // a shorter TTL brings it forward
		{30 * s, 60 * s, 30 * s},  // a longer one does not delay it
		{30 * s, 0, s},            // TTL 0: the floor, not a busy loop
		{30 * s, 300 * ms, s},     // under the floor
		{50 * ms, 0, 50 * ms},     // a refresh under the floor is kept
		{50 * ms, 5 * s, 50 * ms}, //
		{500 * ms, 100 * ms, 500 * ms},
	} {
		if got := nextWait(tc.refresh, tc.ttl); got != tc.want {
			t.Errorf("nextWait(%v, %v) = %v, want %v", tc.refresh, tc.ttl, got, tc.want)
		}
	}
}
