package demo

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Upstream is one running demo server.
type Upstream struct {
	Name string
	Addr string // host:port it listens on
	srv  *http.Server
	done chan struct{}

	inFlight atomic.Int64
}

// InFlight is how many requests hold one of its permits now (with
// Options.Permits or Latency; 0 otherwise).
func (u *Upstream) InFlight() int64 { return u.inFlight.Load() }

// Handler answers every request with name and a newline (GET /healthz
// with "ok"), and an X-Upstream header naming it.
func Handler(name string) http.Handler {
	body := []byte(name + "\n")
	cl := []string{strconv.Itoa(len(body))}
	hdr := []string{name}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["X-Upstream"] = hdr
		h["Content-Type"] = []string{"text/plain; charset=utf-8"}
		h["Content-Length"] = cl
		_, _ = w.Write(body)
	})
}

// Options make a demo upstream behave like a server with a capacity.
type Options struct {
	// Permits, when above 0, is how many requests it serves at once; one
	// more is refused at once with 503 (Retry-After: 0), as a full server
	// refuses: what the capacity strategy learns a limit from.
	Permits int
	// Latency is how long each request holds its permit before the answer.
	Latency time.Duration
}

// Limited is Handler with o's permits and latency. inFlight counts the
// requests holding a permit.
func Limited(name string, o Options, inFlight *atomic.Int64) http.Handler {
	next := Handler(name)
	if o.Permits <= 0 && o.Latency <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		if n := inFlight.Add(1); o.Permits > 0 && n > int64(o.Permits) {
			inFlight.Add(-1)
			w.Header().Set("Retry-After", "0")
			http.Error(w, name+": no permit free ("+strconv.Itoa(o.Permits)+" in use)", http.StatusServiceUnavailable)
			return
		}
		defer inFlight.Add(-1)
		if o.Latency > 0 {
			t := time.NewTimer(o.Latency)
			defer t.Stop()
			select {
			case <-t.C:
			case <-r.Context().Done(): // the client left, or Close cut the connection
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// Start listens on addr ("127.0.0.1:0" for any port) and serves name.
func Start(name, addr string) (*Upstream, error) { return StartWith(name, addr, Options{}) }

// StartWith is Start with a capacity and a latency.
func StartWith(name, addr string, o Options) (*Upstream, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	u := &Upstream{Name: name, Addr: ln.Addr().String(), done: make(chan struct{})}
	u.srv = &http.Server{Handler: Limited(name, o, &u.inFlight)}
	go func() {
		defer close(u.done)
		if err := u.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err
		}
	}()
	return u, nil
}

// Close stops the server at once.
func (u *Upstream) Close() error {
	err := u.srv.Close()
	<-u.done
	return err
}

// StartAll starts one upstream per address, named upstream-1, -2, ...
// On error the ones started are closed.
func StartAll(addrs []string) ([]*Upstream, error) { return StartAllWith(addrs, nil) }

// StartAllWith is StartAll with options per upstream (opts[i] for
// addrs[i]; none past the end of opts).
func StartAllWith(addrs []string, opts []Options) ([]*Upstream, error) {
	var out []*Upstream
	for i, a := range addrs {
		var o Options
		if i < len(opts) {
			o = opts[i]
		}
		u, err := StartWith("upstream-"+strconv.Itoa(i+1), a, o)
		if err != nil {
			CloseAll(out)
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

// CloseAll closes every upstream.
func CloseAll(us []*Upstream) {
	var wg sync.WaitGroup
	for _, u := range us {
		wg.Add(1)
		go func() { defer wg.Done(); _ = u.Close() }()
	}
	wg.Wait()
}

// Wait blocks until ctx ends, then closes the upstreams.
func Wait(ctx context.Context, us []*Upstream) {
	<-ctx.Done()
	CloseAll(us)
}
