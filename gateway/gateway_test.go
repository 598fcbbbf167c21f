package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

// backend is a real upstream server for tests, whose behaviour a test can
// change while it runs.
type backend struct {
	name   string
	addr   string
	srv    *http.Server
	hits   atomic.Int64
	status atomic.Int32 // answer status for normal paths (0: 200)
	health atomic.Int32 // answer status for /healthz (0: 200)
	cur    atomic.Int64 // requests in progress
	peak   atomic.Int64 // most requests in progress at once
	hold   atomic.Pointer[chan struct{}]
	delay  atomic.Int64 // ns to wait before answering
	closed atomic.Bool
}

func newBackend(t testing.TB, name string) *backend {
	t.Helper()
	return newBackendAt(t, name, "127.0.0.1:0")
}

func newBackendAt(t testing.TB, name, addr string) *backend {
	t.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // a just-closed port may linger briefly
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{name: name, addr: ln.Addr().String()}
	b.srv = &http.Server{Handler: b}
	go func() { _ = b.srv.Serve(ln) }()
	t.Cleanup(b.kill)
	return b
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		if s := b.health.Load(); s != 0 {
			w.WriteHeader(int(s))
		}
		io.WriteString(w, "ok")
		return
	}
	b.hits.Add(1)
	n := b.cur.Add(1)
	defer b.cur.Add(-1)
	for {
		p := b.peak.Load()
		if n <= p || b.peak.CompareAndSwap(p, n) {
			break
		}
	}
	if d := b.delay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	if h := b.hold.Load(); h != nil {
		select {
		case <-*h:
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("X-Upstream", b.name)
	if r.URL.Path == "/echo" {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"header": r.Header, "host": r.Host, "body": string(body), "method": r.Method, "proto": r.Proto})
		return
	}
	if s := b.status.Load(); s != 0 {
		w.WriteHeader(int(s))
	}
	io.WriteString(w, b.name)
}

// kill stops the server and drops its connections, in-flight ones too.
func (b *backend) kill() {
	if b.closed.CompareAndSwap(false, true) {
		b.srv.Close()
	}
}

func (b *backend) url() string { return "http://" + b.addr }

func backends(t *testing.T, n int) []*backend {
	bs := make([]*backend, n)
	for i := range bs {
		bs[i] = newBackend(t, fmt.Sprintf("b%d", i+1))
	}
	return bs
}

// targets renders a target list; extra adds fields per target.
func targets(bs []*backend, extra ...string) string {
	var s strings.Builder
	for i, b := range bs {
		e := ""
		if i < len(extra) {
			e = extra[i]
		}
		fmt.Fprintf(&s, "      - {url: %q%s}\n", b.url(), e)
	}
	return s.String()
}

const base = "listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0}\naccess_log: {enabled: false}\n"

// start parses cfgText and runs a gateway on ephemeral ports.
func start(t testing.TB, cfgText string) *gateway.Gateway {
	t.Helper()
	cfg, err := config.Parse([]byte(cfgText))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, cfgText)
	}
	return startCfg(t, cfg, gateway.Options{})
}

func startCfg(t testing.TB, cfg *config.Config, o gateway.Options) *gateway.Gateway {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	g, err := gateway.New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
	})
	return g
}

// serveRaw runs handle on every connection to a fresh loopback listener,
// each in its own goroutine, until the test ends; it returns the
// listener's address. For targets that misbehave below HTTP.
func serveRaw(t testing.TB, handle func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return ln.Addr().String()
}

func client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
}

type resp struct {
	code int
	body string
	hdr  http.Header
}

func do(t *testing.T, c *http.Client, method, url string, body io.Reader, hdr ...string) resp {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "host") {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, string(b), res.Header}
}

func get(t *testing.T, c *http.Client, url string, hdr ...string) resp {
	t.Helper()
	return do(t, c, "GET", url, nil, hdr...)
}

// view fetches the admin view of one upstream's targets by URL.
func view(t *testing.T, g *gateway.Gateway, up string) map[string]gateway.TargetView {
	t.Helper()
	res, err := http.Get("http://" + g.AdminAddr() + "/upstreams/" + up)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var v gateway.UpstreamView
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	m := map[string]gateway.TargetView{}
	for _, tv := range v.Targets {
		m[tv.URL] = tv
	}
	return m
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// failure sends req and reads the whole answer; it returns why the request
// failed (a transport error or a status other than 200), or "".
func failure(c *http.Client, req *http.Request) string {
	res, err := c.Do(req)
	if err != nil {
		return err.Error()
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		return res.Status
	}
	return ""
}

// load runs workers that GET url n times each and counts failures.
func load(t *testing.T, url string, workers, n int, done *atomic.Int64) (failed []string) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	c := client()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				req, err := http.NewRequest("GET", url, nil)
				if err != nil {
					panic(err)
				}
				if msg := failure(c, req); msg != "" {
					mu.Lock()
					failed = append(failed, msg)
					mu.Unlock()
				}
				if done != nil {
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return failed
}

func stringsReader(s string) io.Reader { return strings.NewReader(s) }
