package main

import (
	"context"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Result is what the load generator measured through one contender.
type Result struct {
	Successes int64         // 200s completed in the measured phase
	Errors    int64         // anything else completed in the measured phase
	P50       time.Duration // latency of measured successes
	P99       time.Duration
	P999      time.Duration
	PerSecond []float64 // successes completed in each second of the run, warm-up included
}

// runLoad keeps conns connections busy against url from start for warmup +
// duration, each sending its next request when the previous one answers.
func runLoad(ctx context.Context, url string, load Load, start time.Time) Result {
	conns := load.Connections
	warm := start.Add(load.Warmup.D())
	end := warm.Add(load.Duration.D())
	tr := &http.Transport{
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	seconds := int((end.Sub(start) + time.Second - 1) / time.Second)

	type local struct {
		ok, errs int64
		lats     []time.Duration
		per      []float64
	}
	locals := make([]local, conns)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func(l *local) {
			defer wg.Done()
			l.per = make([]float64, seconds)
			for ctx.Err() == nil {
				t0 := time.Now()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				resp, err := client.Do(req)
				ok := false
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					ok = err == nil && resp.StatusCode == http.StatusOK
				}
				t1 := time.Now()
				if ctx.Err() != nil && !ok {
					return // cut off by the end of the run: not an answer
				}
				if t1.Before(end) {
					if ok {
						if s := int(t1.Sub(start) / time.Second); s >= 0 && s < seconds {
							l.per[s]++
						}
					}
					if !t1.Before(warm) {
						if ok {
							l.ok++
							l.lats = append(l.lats, t1.Sub(t0))
						} else {
							l.errs++
						}
					}
				}
				if err != nil && !ok {
					// A transport error (refused, reset): do not spin.
					select {
					case <-ctx.Done():
					case <-time.After(time.Millisecond):
					}
				}
			}
		}(&locals[i])
	}
	wg.Wait()
	var r Result
	r.PerSecond = make([]float64, seconds)
	var lats []time.Duration
	for _, l := range locals {
		r.Successes += l.ok
		r.Errors += l.errs
		lats = append(lats, l.lats...)
		for i, v := range l.per {
			r.PerSecond[i] += v
		}
	}
	slices.Sort(lats)
	r.P50, r.P99, r.P999 = quantile(lats, 0.5), quantile(lats, 0.99), quantile(lats, 0.999)
	return r
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}
