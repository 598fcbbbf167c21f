package gateway_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/gateway/demo"
)

// examples/gateway/learned.yaml learns: in front of demo upstreams that
// hold 3, 6 and 12 permits and refuse one more with 503, more clients
// than permits are all served (the rest wait in the queue, refusals are
// retried), and each target's limit is learned near its real permits.
// Real sockets; the example's addresses moved to free ports.
func TestLearnedExampleLearns(t *testing.T) {
	permits := []int{3, 6, 12}
	opts := make([]demo.Options, len(permits))
	for i, p := range permits {
		opts[i] = demo.Options{Permits: p, Latency: 20 * time.Millisecond}
	}
	us, err := demo.StartAllWith([]string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { demo.CloseAll(us) })
	cfg, err := config.LoadWith("../examples/gateway/learned.yaml", func(c *config.Config) {
		c.Listen, c.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
		f := false
		c.AccessLog.Enabled = &f
		for i := range c.Upstreams["workers"].Targets {
			c.Upstreams["workers"].Targets[i].URL = "http://" + us[i].Addr
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range cfg.Upstreams["workers"].Targets {
		if tg.MaxConcurrency != 0 {
			t.Fatalf("the example configures max_concurrency %d on %s: nothing would be learned", tg.MaxConcurrency, tg.URL)
		}
	}
	g := startCfg(t, cfg, gateway.Options{})
	const clients, each = 32, 60 // 32 at once, against 21 permits
	var (
		wg      sync.WaitGroup
		refused atomic.Int64
		done    = make(chan struct{})
		samples = make([][]int64, len(us))
	)
	for range clients {
		wg.Go(func() {
			c := client()
			for range each {
				if r := get(t, c, "http://"+g.Addr()+"/"); r.code != 200 {
					if r.code != 503 {
						t.Errorf("a request answered %d %q, want 200 (or a refusal passed on)", r.code, r.body)
					}
					refused.Add(1)
				}
			}
		})
	}
	// The limits while the load runs, as often as the admin API answers.
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-done:
				return
			default:
			}
			v := view(t, g, "workers")
			for i, u := range us {
				if tv := v["http://"+u.Addr]; tv.PermitsSource == "learned" {
					samples[i] = append(samples[i], tv.Permits)
				}
			}
		}
	}()
	wg.Wait()
	close(done)
	<-sampled
	// A sharp burst of 32 meets limits of 20 each at first: a refusal
	// whose retry is refused too is passed on. Those are a few.
	if n := refused.Load(); n*20 > clients*each {
		t.Errorf("%d of %d requests refused, want under 5%%", n, clients*each)
	}
	for i, u := range us {
		ls := samples[i]
		if len(ls) == 0 {
			t.Fatalf("%s: no learned limit seen", u.Name)
		}
		slices.Sort(ls)
		p, median := int64(permits[i]), ls[len(ls)/2]
		t.Logf("%s with %d permits: learned limit median %d over %d samples (min %d, max %d)", u.Name, p, median, len(ls), ls[0], ls[len(ls)-1])
		if median < (p+1)/2 || median > 2*p || (p < 10 && median >= 20) {
			t.Errorf("%s with %d permits: learned limit median %d, want it near %d (initial 20)", u.Name, p, median, p)
		}
	}
}
