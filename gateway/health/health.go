package health

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"
)

// Config is one upstream's active check.
type Config struct {
	Path               string
	Interval           time.Duration
	Timeout            time.Duration
	HealthyThreshold   int
	UnhealthyThreshold int
	// Scheme is http (default) or https; the client given to Start
	// carries the TLS settings.
	Scheme string
}

// Target is one target to check and the state it starts in.
type Target struct {
	Addr    string // host:port
	Healthy bool
}

// Verdict receives a target's new state when it changes, and every
// probe's outcome when Probe is set.
type Verdict interface {
	SetHealthy(addr string, healthy bool) error
}

// Checker probes a set of targets until Stop. Set changes the set: a
// target that stays keeps its probe loop, so its timing and the run of
// probes toward a threshold survive a discovery update or an admin
// change, and a fleet that changes often is not probed all at once on
// every change.
type Checker struct {
	cfg     Config
	v       Verdict
	client  *http.Client
	observe func(string, bool)

	mu    sync.Mutex
	loops map[string]context.CancelFunc // by address; nil after Stop
	wg    sync.WaitGroup
}

// Start begins probing every target; client may be nil (a client with no
// keep-alive reuse between targets is made). observe, if not nil, sees
// every probe's outcome (for metrics).
func Start(cfg Config, targets []Target, v Verdict, client *http.Client, observe func(addr string, ok bool)) *Checker {
	if client == nil {
		client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}}
	}
	c := &Checker{cfg: cfg, v: v, client: client, observe: observe, loops: map[string]context.CancelFunc{}}
	c.Set(targets)
	return c
}

// Config is the check c runs.
func (c *Checker) Config() Config { return c.cfg }

// Client is the client c probes with.
func (c *Checker) Client() *http.Client { return c.client }

// Set makes targets the probed set: loops of targets no longer in it end,
// new targets start from the state given, and targets already probed
// keep their loop (the state given for them is ignored: the loop's own
// run of probes is the newer word).
func (c *Checker) Set(targets []Target) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loops == nil {
		return // stopped
	}
	keep := make(map[string]bool, len(targets))
	for _, t := range targets {
		keep[t.Addr] = true
		if c.loops[t.Addr] != nil {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		c.loops[t.Addr] = cancel
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			run(ctx, c.cfg, t, c.v, c.client, c.observe)
		}()
	}
	for addr, cancel := range c.loops {
		if !keep[addr] {
			cancel()
			delete(c.loops, addr)
		}
	}
}

// Stop ends every probe loop and waits for them.
func (c *Checker) Stop() {
	if c == nil {
		return
	}
	c.mu.Lock()
	for _, cancel := range c.loops {
		cancel()
	}
	c.loops = nil
	c.mu.Unlock()
	c.wg.Wait()
}

func run(ctx context.Context, cfg Config, t Target, v Verdict, client *http.Client, observe func(string, bool)) {
	healthy := t.Healthy
	okRun, failRun := 0, 0
	scheme := cfg.Scheme
	if scheme == "" {
		scheme = "http"
	}
	url := scheme + "://" + t.Addr + cfg.Path
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	for {
		ok := Probe(ctx, client, url, cfg.Timeout)
		if ctx.Err() != nil {
			return
		}
		if observe != nil {
			observe(t.Addr, ok)
		}
		if ok {
			okRun, failRun = okRun+1, 0
			if !healthy && okRun >= cfg.HealthyThreshold {
				healthy = true
				_ = v.SetHealthy(t.Addr, true)
			}
		} else {
			okRun, failRun = 0, failRun+1
			if healthy && failRun >= cfg.UnhealthyThreshold {
				healthy = false
				_ = v.SetHealthy(t.Addr, false)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Probe GETs url and reports whether it answered 2xx or 3xx within
// timeout.
func Probe(ctx context.Context, client *http.Client, url string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	req.Header.Set("User-Agent", "fulcrum-health/1")
	res, err := client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	return res.StatusCode >= 200 && res.StatusCode < 400
}
