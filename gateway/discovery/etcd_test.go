package discovery

import (
	"strings"
	"testing"
	"time"

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
