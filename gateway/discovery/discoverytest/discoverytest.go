// Package discoverytest runs the real sources discovery tests need: a DNS
// server on loopback (github.com/miekg/dns) whose records a test changes,
// and an etcd server.
package discoverytest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// DNS is an authoritative DNS server on 127.0.0.1, over UDP and TCP on one
// port, answering from records a test sets.
type DNS struct {
	// Addr is host:port.
	Addr string

	mu      sync.Mutex
	records map[string][]dns.RR // by lower-case FQDN
	fail    int                 // rcode to answer everything with; 0 = answer
	failT   map[uint16]int      // rcode to answer queries of a type with
	queries int
}

// StartDNS starts a server; it stops when the test ends.
func StartDNS(t testing.TB) *DNS {
	t.Helper()
	d := &DNS{records: map[string][]dns.RR{}}
	var pc net.PacketConn
	var ln net.Listener
	for range 20 {
		var err error
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	if pc == nil {
		t.Fatal("no loopback port free for both UDP and TCP")
	}
	d.Addr = pc.LocalAddr().String()
	udp := &dns.Server{PacketConn: pc, Handler: d}
	tcp := &dns.Server{Listener: ln, Handler: d}
	go func() { _ = udp.ActivateAndServe() }()
	go func() { _ = tcp.ActivateAndServe() }()
	t.Cleanup(func() {
		_ = udp.Shutdown()
		_ = tcp.Shutdown()
	})
	return d
}

// Set replaces every record of the zone with rrs, given in zone-file form
// ("api.test. 5 IN A 127.0.0.1").
func (d *DNS) Set(t testing.TB, rrs ...string) {
	t.Helper()
	m := map[string][]dns.RR{}
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatalf("record %q: %v", s, err)
		}
		name := strings.ToLower(rr.Header().Name)
		m[name] = append(m[name], rr)
	}
	d.mu.Lock()
	d.records = m
	d.mu.Unlock()
}

// Fail makes every answer carry rcode (dns.RcodeServerFailure, say); 0
// answers normally again.
func (d *DNS) Fail(rcode int) {
	d.mu.Lock()
	d.fail = rcode
	d.mu.Unlock()
}

// FailType makes answers to queries of type qtype carry rcode; 0 answers
// them normally again.
func (d *DNS) FailType(qtype uint16, rcode int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failT == nil {
		d.failT = map[uint16]int{}
	}
	d.failT[qtype] = rcode
}

// Queries returns how many queries were answered.
func (d *DNS) Queries() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.queries
}

// ServeDNS answers from the records: the matching type in the answer, and
// for SRV the targets' addresses as additional records. A name without
// records of any type is NXDOMAIN.
func (d *DNS) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queries++
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	q := req.Question[0]
	if rc := max(d.fail, d.failT[q.Qtype]); rc != 0 {
		m.Rcode = rc
		_ = w.WriteMsg(m)
		return
	}
	name := strings.ToLower(q.Name)
	if _, ok := d.records[name]; !ok {
		m.Rcode = dns.RcodeNameError
	}
	// As a recursive resolver does, an alias is answered with its CNAME
	// and then the records of its target (a short chain at most).
	for range 8 {
		next := ""
		for _, rr := range d.records[name] {
			if c, ok := rr.(*dns.CNAME); ok && q.Qtype != dns.TypeCNAME {
				m.Answer = append(m.Answer, rr)
				next = strings.ToLower(c.Target)
				continue
			}
			if rr.Header().Rrtype != q.Qtype {
				continue
			}
			m.Answer = append(m.Answer, rr)
			if srv, ok := rr.(*dns.SRV); ok {
				m.Extra = append(m.Extra, d.records[strings.ToLower(srv.Target)]...)
			}
		}
		if next == "" {
			break
		}
		name = next
	}
	_ = w.WriteMsg(m)
}

// Etcd returns the client URL of an etcd server: testenv's (127.0.0.1:2379,
// or FULCRUM_TEST_ETCD) when one listens there, as under CI; else a new
// etcd process (Debian's etcd-server) on free loopback ports with a
// temporary data directory, stopped when the test ends; else testenv.Etcd
// skips the test, or fails it under CI=true.
func Etcd(t testing.TB) string {
	t.Helper()
	if c, err := net.DialTimeout("tcp", testenv.EtcdAddr, time.Second); err == nil {
		c.Close()
		return testenv.Etcd(t)
	}
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return testenv.Etcd(t)
	}
	client, peer := freePort(t), freePort(t)
	url := "http://" + client
	cmd := exec.Command(bin, "--name", "test", "--data-dir", t.TempDir(),
		"--listen-client-urls", url, "--advertise-client-urls", url,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "test=http://"+peer, "--log-level", "error")
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	testenv.Eventually(t, "etcd at "+url+" to answer", func() bool {
		select {
		case <-done:
			t.Fatalf("etcd exited: %s", out)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := cli.Get(ctx, "probe")
		return err == nil
	})
	return url
}

// Prefix is a key prefix of the test's own, so tests sharing one etcd do
// not see each other's keys.
func Prefix(t testing.TB) string {
	return fmt.Sprintf("/fulcrum-test/%s/%d/", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano())
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
