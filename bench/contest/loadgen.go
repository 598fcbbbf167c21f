package main

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Result is what the load generator measured through one contender.
type Result struct {
	Successes int64            // 200s completed in the measured phase
	Errors    int64            // anything else completed in the measured phase
	ErrorsBy  map[string]int64 // Errors by answer: the status code, or "timeout" or "transport"
	P50       time.Duration    // latency of measured successes
	P99       time.Duration
	P999      time.Duration
	PerSecond []float64 // successes completed in each second of the run, warm-up included
}

// runLoad runs the load against urls (one per instance of the contender,
// the load spread evenly across them) from start for warmup + duration:
// closed loop, the connections each send their next request when the
// previous one answers; open loop, requests arrive at the load's rate
// whatever the answers.
func runLoad(ctx context.Context, urls []string, load Load, seed uint64, start time.Time) Result {
	warm := start.Add(load.Warmup.D())
	end := warm.Add(load.Duration.D())
	conns := load.Connections
	if load.open() {
		// Open loop, a connection per request in flight: room for a
		// second of the highest rate before any waits for a connection.
		conns = 0
		for _, r := range load.Rate {
			conns = max(conns, int(r.RPS)+1)
		}
	}
	tr := &http.Transport{
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	if !load.open() {
		tr.MaxConnsPerHost = conns
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: load.timeout()}
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	seconds := int((end.Sub(start) + time.Second - 1) / time.Second)

	var locals []*tally
	if load.open() {
		locals = openLoop(ctx, client, urls, load, seed, start, warm, end, seconds)
	} else {
		locals = make([]*tally, conns)
		var wg sync.WaitGroup
		for i := range conns {
			l := newTally(seconds)
			locals[i] = l
			url := urls[i%len(urls)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					ok, err := l.one(ctx, client, url, start, warm, end)
					if ctx.Err() != nil && !ok {
						return // cut off by the end of the run: not an answer
					}
					if err != nil && !ok {
						// A transport error (refused, reset): do not spin.
						select {
						case <-ctx.Done():
						case <-time.After(time.Millisecond):
						}
					}
				}
			}()
		}
		wg.Wait()
	}
	var r Result
	r.PerSecond = make([]float64, seconds)
	var lats []time.Duration
	for _, l := range locals {
		r.Successes += l.ok
		r.Errors += l.errs
		for k, v := range l.by {
			if r.ErrorsBy == nil {
				r.ErrorsBy = map[string]int64{}
			}
			r.ErrorsBy[k] += v
		}
		lats = append(lats, l.lats...)
		for i, v := range l.per {
			r.PerSecond[i] += v
		}
	}
	slices.Sort(lats)
	r.P50, r.P99, r.P999 = quantile(lats, 0.5), quantile(lats, 0.99), quantile(lats, 0.999)
	return r
}

// tally is one load goroutine's count; only it writes its own.
type tally struct {
	ok, errs int64
	by       map[string]int64 // errs by answer (Result.ErrorsBy)
	lats     []time.Duration
	per      []float64
}

func newTally(seconds int) *tally { return &tally{per: make([]float64, seconds)} }

// one sends one request to url and counts its answer: a success (200)
// or an error (anything else, the client's timeout included) if it
// ended in the measured phase. A request the end of the run cut off is
// not counted.
func (l *tally) one(ctx context.Context, client *http.Client, url string, start, warm, end time.Time) (ok bool, err error) {
	t0 := time.Now()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := client.Do(req)
	status := 0
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ok = err == nil && resp.StatusCode == http.StatusOK
		status = resp.StatusCode
	}
	t1 := time.Now()
	if ctx.Err() != nil && !ok {
		return ok, err
	}
	if t1.Before(end) {
		if ok {
			if s := int(t1.Sub(start) / time.Second); s >= 0 && s < len(l.per) {
				l.per[s]++
			}
		}
		if !t1.Before(warm) {
			if ok {
				l.ok++
				l.lats = append(l.lats, t1.Sub(t0))
			} else {
				l.errs++
				if l.by == nil {
					l.by = map[string]int64{}
				}
				switch {
				case err == nil:
					l.by[strconv.Itoa(status)]++
				case errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err):
					l.by["timeout"]++
				default:
					l.by["transport"]++
				}
			}
		}
	}
	return ok, err
}

// openLoop sends requests at Poisson arrivals of the load's rate (each
// stage's, from its offset), the k-th to urls[k%len(urls)], each on its
// own goroutine, until end; it returns when every request has answered
// or timed out. The arrivals are seeded: every contender gets the same.
func openLoop(ctx context.Context, client *http.Client, urls []string, load Load, seed uint64, start, warm, end time.Time, seconds int) []*tally {
	rng := rand.New(rand.NewPCG(seed, 0x6f70656e)) // "open"
	var (
		mu     sync.Mutex
		free   []*tally // tallies of requests that ended, for reuse
		all    []*tally
		wg     sync.WaitGroup
		next   = start
		sent   int
		ticker = time.NewTicker(time.Millisecond)
	)
	defer ticker.Stop()
	for {
		// Launch every arrival that is due, then sleep a tick: the
		// runtime's timers are too coarse for one sleep per arrival.
		now := time.Now()
		for !next.After(now) {
			at := next.Sub(start)
			rate := load.rateAt(at)
			if rate <= 0 {
				// Nothing arrives until the next stage.
				next = start.Add(nextRateChange(load, at))
				continue
			}
			next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
			mu.Lock()
			var l *tally
			if n := len(free); n > 0 {
				l, free = free[n-1], free[:n-1]
			} else {
				l = newTally(seconds)
				all = append(all, l)
			}
			mu.Unlock()
			url := urls[sent%len(urls)]
			sent++
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = l.one(ctx, client, url, start, warm, end)
				mu.Lock()
				free = append(free, l)
				mu.Unlock()
			}()
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return all
		case <-ticker.C:
		}
	}
}

// nextRateChange is the offset of the first rate stage after at (or far
// beyond the run when none follows).
func nextRateChange(load Load, at time.Duration) time.Duration {
	for _, r := range load.Rate {
		if r.At.D() > at {
			return r.At.D()
		}
	}
	return maxRun + time.Hour
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}
