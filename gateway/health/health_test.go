package health_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway/health"
)

type verdicts struct {
	mu  sync.Mutex
	log []bool
}

func (v *verdicts) SetHealthy(addr string, ok bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.log = append(v.log, ok)
	return nil
}

func (v *verdicts) get() []bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]bool(nil), v.log...)
}

// The verdict flips only after the threshold's worth of probes in a row.
func TestThresholds(t *testing.T) {
	var status atomic.Int32
	status.Store(200)
	var probes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probes.Add(1)
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	v := &verdicts{}
	var fails, oks atomic.Int64
	c := health.Start(health.Config{Path: "/healthz", Interval: 5 * time.Millisecond, Timeout: time.Second, HealthyThreshold: 3, UnhealthyThreshold: 2},
		[]health.Target{{Addr: strings.TrimPrefix(srv.URL, "http://"), Healthy: true}}, v, nil,
		func(addr string, ok bool) {
			if ok {
				oks.Add(1)
			} else {
				fails.Add(1)
			}
		})
	defer c.Stop()
	await := func(what string, cond func() bool) {
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out: %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	await("a few good probes", func() bool { return oks.Load() >= 3 })
	if len(v.get()) != 0 {
		t.Fatalf("healthy target got verdicts %v", v.get())
	}
	status.Store(503)
	await("unhealthy verdict", func() bool { return len(v.get()) == 1 })
	if f := fails.Load(); f < 2 || v.get()[0] {
		t.Fatalf("verdict %v after %d failures", v.get(), f)
	}
	o := oks.Load()
	status.Store(200)
	await("healthy verdict", func() bool { return len(v.get()) == 2 })
	if n := oks.Load() - o; n < 3 || !v.get()[1] {
		t.Fatalf("verdict %v after %d successes", v.get(), n)
	}
}
