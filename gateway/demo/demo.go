package demo

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// Upstream is one running demo server.
type Upstream struct {
	Name string
	Addr string // host:port it listens on
	srv  *http.Server
	done chan struct{}
}

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

// Start listens on addr ("127.0.0.1:0" for any port) and serves name.
func Start(name, addr string) (*Upstream, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	u := &Upstream{Name: name, Addr: ln.Addr().String(), srv: &http.Server{Handler: Handler(name)}, done: make(chan struct{})}
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
func StartAll(addrs []string) ([]*Upstream, error) {
	var out []*Upstream
	for i, a := range addrs {
		u, err := Start("upstream-"+strconv.Itoa(i+1), a)
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
