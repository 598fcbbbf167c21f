package discovery

import (
	"context"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/gateway/discovery/discoverytest"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

func etcdBlock(t *testing.T) config.EtcdDiscovery {
	return config.EtcdDiscovery{Endpoints: []string{discoverytest.Etcd(t)}, Prefix: discoverytest.Prefix(t),
		DialTimeout: config.Duration(5 * time.Second)}
}

func TestEtcdRegisterWatchAndLeaseLapse(t *testing.T) {
	blk := etcdBlock(t)
	cli, err := NewEtcdClient(blk)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	log, logs := newLog()
	p, err := NewEtcd(blk, log)
	if err != nil {
		t.Fatal(err)
	}
	r := watch(t, p)
	r.await(t, "") // an empty prefix is an empty list

	started := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	a, err := Register(t.Context(), cli, blk.Prefix, Target{URL: "http://127.0.0.1:9001", Weight: 3, StartedAt: started}, 2*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Key != blk.Prefix+"127.0.0.1:9001" {
		t.Fatalf("key %q", a.Key)
	}
	// A registration whose process will die (its client closed without
	// deregistering): its lease must lapse.
	dying, err := NewEtcdClient(blk)
	if err != nil {
		t.Fatal(err)
	}
	defer dying.Close()
	if _, err := Register(t.Context(), dying, blk.Prefix, Target{URL: "http://127.0.0.1:9002", Weight: 1, MaxConcurrency: 4, StartedAt: started}, 2*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	r.await(t, "http://127.0.0.1:9001 w=3 started=10:00:00, http://127.0.0.1:9002 w=1 mc=4 started=10:00:00")

	// Registered again with a new weight: the change arrives; kept alive
	// past several TTLs, it stays.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a, err = Register(t.Context(), cli, blk.Prefix, Target{URL: "http://127.0.0.1:9001", Weight: 5, StartedAt: started}, 2*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.await(t, "http://127.0.0.1:9001 w=5 started=10:00:00, http://127.0.0.1:9002 w=1 mc=4 started=10:00:00")

	// The second provider stops keeping its lease alive (as if killed):
	// its key disappears when the lease lapses.
	dying.Close()
	r.await(t, "http://127.0.0.1:9001 w=5 started=10:00:00")

	// A bad value is logged and left out; the rest stand.
	if _, err := cli.Put(t.Context(), blk.Prefix+"junk", `{"url": "ftp://x"}`); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the bad registration logged", func() bool { return strings.Contains(logs.String(), "junk") })
	if got := r.last(); got != "http://127.0.0.1:9001 w=5 started=10:00:00" {
		t.Fatalf("after a bad value: %s", got)
	}

	// Close deletes the key at once.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	r.await(t, "")
	got, err := p.Lookup(t.Context())
	if err != nil || len(got) != 0 {
		t.Fatalf("Lookup after everyone left = %v, %v", got, err)
	}
}

func TestParseRegistration(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"url": "http://10.0.0.1:80"}`, ""},
		{`{"url": "http://10.0.0.1:80", "weight": 0, "started_at": "2026-11-23T10:00:00Z"}`, ""},
		{`{"url": "http://10.0.0.1:80", "wieght": 2}`, "unknown field"},
		{`{"url": "tcp://10.0.0.1:80"}`, "scheme must be http"},
		{`{"url": "http://10.0.0.1:80", "weight": -1}`, "negative"},
		{`not json`, "not a registration"},
	} {
		_, err := ParseRegistration([]byte(c.in))
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseRegistration(%s) = %v, want %q", c.in, err, c.want)
		}
	}
}

var _ = clientv3.WithPrefix

// etcdProc is an etcd process of the test's own, which it stops and
// starts again (same ports, same data).
type etcdProc struct {
	t            *testing.T
	bin, dir     string
	client, peer string
	cmd          *exec.Cmd
	done         chan struct{}
}

func startEtcdProc(t *testing.T) *etcdProc {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("etcd: the binary is not installed (Debian's etcd-server; .ci/run installs it)")
		}
		t.Skip("etcd: the binary is not installed (apt-get install etcd-server, or run .ci/run); this test stops and starts its own")
	}
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	p := &etcdProc{t: t, bin: bin, dir: t.TempDir(), client: free(), peer: free()}
	p.start()
	t.Cleanup(p.stop)
	return p
}

func (p *etcdProc) url() string { return "http://" + p.client }

func (p *etcdProc) start() {
	p.cmd = exec.Command(p.bin, "--name", "outage", "--data-dir", p.dir,
		"--listen-client-urls", p.url(), "--advertise-client-urls", p.url(),
		"--listen-peer-urls", "http://"+p.peer, "--initial-advertise-peer-urls", "http://"+p.peer,
		"--initial-cluster", "outage=http://"+p.peer, "--log-level", "error")
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("starting etcd: %v", err)
	}
	done := make(chan struct{})
	p.done = done
	go func() { _ = p.cmd.Wait(); close(done) }()
}

func (p *etcdProc) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.cmd = nil
}

// An etcd outage is logged once when it starts and once when etcd answers
// again, however many times the source retried between; the targets stay
// through it, and a change made after the recovery arrives.
func TestEtcdOutageLoggedOnceAndRecovery(t *testing.T) {
	ep := startEtcdProc(t)
	blk := config.EtcdDiscovery{Endpoints: []string{ep.url()}, Prefix: discoverytest.Prefix(t), DialTimeout: config.Duration(time.Second)}
	cli, err := NewEtcdClient(blk)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	testenv.Eventually(t, "etcd answering", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := cli.Put(ctx, blk.Prefix+"a", `{"url":"http://127.0.0.1:9001"}`)
		return err == nil
	})
	log, logs := newLog()
	p, err := NewEtcd(blk, log)
	if err != nil {
		t.Fatal(err)
	}
	p.probe = 50 * time.Millisecond
	r := watch(t, p)
	r.await(t, "http://127.0.0.1:9001 w=1")

	ep.stop()
	down := "source unavailable"
	testenv.Eventually(t, "the outage logged", func() bool { return strings.Contains(logs.String(), down) })
	// Several retries fail while it is down (the recovery line counts
	// them); the outage line stays one.
	ep.start()
	testenv.Eventually(t, "the recovery logged", func() bool { return strings.Contains(logs.String(), "source answers again") })
	if _, err := cli.Put(context.Background(), blk.Prefix+"b", `{"url":"http://127.0.0.1:9002"}`); err != nil {
		t.Fatal(err)
	}
	r.await(t, "http://127.0.0.1:9001 w=1, http://127.0.0.1:9002 w=1")
	out := logs.String()
	if n := strings.Count(out, down); n != 1 {
		t.Fatalf("the outage logged %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, "source answers again"); n != 1 {
		t.Fatalf("the recovery logged %d times, want once:\n%s", n, out)
	}
	m := regexp.MustCompile(`failed_tries=(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no failed_tries in the recovery line:\n%s", out)
	}
	t.Logf("outage and recovery logged once each; %s tries failed between", m[1])
}

// A DNS source whose server fails logs once, and once when it answers.
func TestDNSOutageLoggedOnceAndRecovery(t *testing.T) {
	srv := discoverytest.StartDNS(t)
	srv.Set(t, "api.test. 0 IN A 127.0.0.1")
	log, logs := newLog()
	srv.Set(t, "api.test. 60 IN A 127.0.0.1")
	p, err := NewDNS(dnsBlock(srv.Addr, "api.test", "A", 9000), log)
	if err != nil {
		t.Fatal(err)
	}
	r := watch(t, p)
	r.await(t, "http://127.0.0.1:9000 w=1")
	srv.Fail(dns.RcodeServerFailure)
	q := srv.Queries()
	testenv.Eventually(t, "several failed lookups", func() bool { return srv.Queries() > q+2 })
	srv.Fail(0)
	srv.Set(t, "api.test. 60 IN A 127.0.0.2")
	r.await(t, "http://127.0.0.2:9000 w=1")
	out := logs.String()
	if n := strings.Count(out, "source unavailable"); n != 1 {
		t.Fatalf("the outage logged %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, "source answers again"); n != 1 {
		t.Fatalf("the recovery logged %d times, want once:\n%s", n, out)
	}
}
