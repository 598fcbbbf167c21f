package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/miekg/dns"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

// DNS resolves a name every refresh, or sooner when the records' TTL is
// shorter (as nginx's resolver honours TTLs): A and AAAA records (the port
// from the config) or SRV records (port and weight from each record).
type DNS struct {
	cfg    config.DNSDiscovery
	server string
	log    *slog.Logger
}

// NewDNS builds a DNS source from a validated block. Without a server it
// asks the first nameserver of /etc/resolv.conf.
func NewDNS(c config.DNSDiscovery, log *slog.Logger) (*DNS, error) {
	d := &DNS{cfg: c, server: c.Server, log: log}
	if d.server == "" {
		rc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil || len(rc.Servers) == 0 {
			return nil, fmt.Errorf("discovery: dns: no server configured and none in /etc/resolv.conf (%v)", err)
		}
		d.server = net.JoinHostPort(rc.Servers[0], rc.Port)
	}
	return d, nil
}

// Source is "dns".
func (d *DNS) Source() string { return "dns" }

// minTTLWait is the shortest wait between resolutions however short the
// records' TTL (0 included): a name served with TTL 0 (Consul's default)
// is not asked for in a busy loop.
const minTTLWait = time.Second

// Watch resolves the name now and again after nextWait.
func (d *DNS) Watch(ctx context.Context, update func([]Target)) {
	s := sender{update: update}
	ttl := time.Duration(-1) // the last good answer's TTL; none yet
	out := outage{log: d.log, msg: "discovery: dns", attrs: []any{"name", d.cfg.Name, "server", d.server}}
	for {
		ts, t, err := d.lookup(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			out.fail(err)
		default:
			out.ok()
			s.send(ts)
			ttl = t
		}
		if !sleep(ctx, nextWait(d.cfg.Refresh.D(), ttl)) {
			return
		}
	}
}

// nextWait is the wait before the next resolution: refresh, or the last
// good answer's shortest TTL when that is shorter (ttl < 0: no answer
// yet), but not under minTTLWait unless refresh itself is. After a
// failed lookup the last good TTL still applies, so one SERVFAIL does not
// leave the targets a whole refresh old.
func nextWait(refresh, ttl time.Duration) time.Duration {
	if ttl < 0 || ttl >= refresh {
		return refresh
	}
	return max(ttl, min(minTTLWait, refresh))
}

// Lookup resolves the name once. No records at all is an error, so a
// name that briefly vanishes keeps the last good list instead of
// draining every target.
func (d *DNS) Lookup(ctx context.Context) ([]Target, error) {
	ts, _, err := d.lookup(ctx)
	return ts, err
}

// lookup is Lookup with the shortest TTL of the records it used.
func (d *DNS) lookup(ctx context.Context) ([]Target, time.Duration, error) {
	var ts []Target
	ttl := time.Duration(math.MaxInt64)
	use := func(rrs []dns.RR) {
		for _, rr := range rrs {
			ttl = min(ttl, time.Duration(rr.Header().Ttl)*time.Second)
		}
	}
	if d.cfg.Type == "SRV" {
		srvs, extra, err := d.query(ctx, d.cfg.Name, dns.TypeSRV)
		if err != nil {
			return nil, 0, err
		}
		use(srvs)
		// RFC 2782: only the lowest priority is used; the rest are backups.
		best := -1
		for _, rr := range srvs {
			if s, ok := rr.(*dns.SRV); ok && (best < 0 || int(s.Priority) < best) {
				best = int(s.Priority)
			}
		}
		for _, rr := range srvs {
			s, ok := rr.(*dns.SRV)
			if !ok || int(s.Priority) != best || s.Target == "." {
				continue
			}
			ips := addrsIn(extra, s.Target)
			if len(ips) > 0 {
				use(extra)
			} else {
				var rrs []dns.RR
				if rrs, err = d.addrRecords(ctx, s.Target); err != nil {
					return nil, 0, fmt.Errorf("SRV target %s: %w", s.Target, err)
				}
				use(rrs)
				ips = addrsIn(rrs, s.Target)
			}
			// Weight 0 is "rarely picked" in RFC 2782, never "excluded".
			w := max(int(s.Weight), 1)
			for _, ip := range ips {
				ts = append(ts, d.target(ip, int(s.Port), w))
			}
		}
	} else {
		rrs, err := d.addrRecords(ctx, d.cfg.Name)
		if err != nil {
			return nil, 0, err
		}
		use(rrs)
		for _, ip := range addrsIn(rrs, d.cfg.Name) {
			ts = append(ts, d.target(ip, d.cfg.Port, 1))
		}
	}
	if len(ts) == 0 {
		return nil, 0, fmt.Errorf("%s %s: no records", d.cfg.Name, d.cfg.Type)
	}
	ts = dedupe(ts)
	sortTargets(ts)
	return ts, ttl, nil
}

func (d *DNS) target(ip string, port, weight int) Target {
	scheme := d.cfg.Scheme
	if scheme == "" {
		scheme = "http"
	}
	return Target{URL: scheme + "://" + net.JoinHostPort(ip, strconv.Itoa(port)), Weight: weight, MaxConcurrency: d.cfg.MaxConcurrency}
}

// addrRecords resolves a name's A and AAAA records. Either query failing
// fails the lookup: half an answer would drain the other family's
// targets.
func (d *DNS) addrRecords(ctx context.Context, name string) ([]dns.RR, error) {
	var all []dns.RR
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
		rrs, _, err := d.query(ctx, name, qt)
		if err != nil {
			return nil, err
		}
		all = append(all, rrs...)
	}
	return all, nil
}

// addrsIn picks the A/AAAA records for name out of rrs, following a
// CNAME chain in them (a recursive resolver answers a name that is an
// alias with the CNAME and the A records of its target).
func addrsIn(rrs []dns.RR, name string) []string {
	names := map[string]bool{dns.CanonicalName(name): true}
	for range 8 { // a chain longer than this is a loop or a broken zone
		grew := false
		for _, rr := range rrs {
			if c, ok := rr.(*dns.CNAME); ok && names[dns.CanonicalName(c.Hdr.Name)] && !names[dns.CanonicalName(c.Target)] {
				names[dns.CanonicalName(c.Target)] = true
				grew = true
			}
		}
		if !grew {
			break
		}
	}
	var ips []string
	for _, rr := range rrs {
		if !names[dns.CanonicalName(rr.Header().Name)] {
			continue
		}
		switch r := rr.(type) {
		case *dns.A:
			ips = append(ips, r.A.String())
		case *dns.AAAA:
			ips = append(ips, r.AAAA.String())
		}
	}
	return ips
}

// query asks the server over UDP, again over TCP when the answer was
// truncated. A name that does not exist is an error; a type without
// records is not.
func (d *DNS) query(ctx context.Context, name string, qt uint16) (answer, extra []dns.RR, err error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qt)
	m.SetEdns0(4096, false)
	for _, network := range []string{"udp", "tcp"} {
		c := &dns.Client{Net: network, Timeout: d.cfg.Timeout.D()}
		qctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout.D())
		r, _, err := c.ExchangeContext(qctx, m, d.server)
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("%s %s: %w", name, dns.TypeToString[qt], err)
		}
		if r.Truncated && network == "udp" {
			continue
		}
		switch r.Rcode {
		case dns.RcodeSuccess:
			return r.Answer, r.Extra, nil
		case dns.RcodeNameError:
			return nil, nil, fmt.Errorf("%s: no such name", name)
		default:
			return nil, nil, fmt.Errorf("%s %s: server answered %s", name, dns.TypeToString[qt], dns.RcodeToString[r.Rcode])
		}
	}
	return nil, nil, fmt.Errorf("%s %s: truncated over TCP", name, dns.TypeToString[qt])
}

func dedupe(ts []Target) []Target {
	seen := map[string]bool{}
	out := ts[:0]
	for _, t := range ts {
		if !seen[t.URL] {
			seen[t.URL] = true
			out = append(out, t)
		}
	}
	return out
}

var _ Provider = (*DNS)(nil)
