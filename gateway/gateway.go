package gateway

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/gateway/discovery"
	"github.com/fulcrum-lb/fulcrum/gateway/internal/h2srv"
	"github.com/prometheus/client_golang/prometheus"
)

// Options are the gateway's process-level settings.
type Options struct {
	// ConfigPath is the file Reload reads again. Empty: Reload fails.
	ConfigPath string
	// Override, when set, is applied to the file each Reload reads
	// before it is validated (see config.LoadWith): the command line's
	// --listen and --admin, which would otherwise be reloads refused.
	Override func(*config.Config)
	// Logger receives the gateway's own events (default slog.Default()).
	Logger *slog.Logger
	// AccessLog, when not nil, replaces the access log's destination
	// (tests); the config's access_log.enabled still applies.
	AccessLog io.Writer
	// Providers are discovery sources written in Go, by name, for the
	// upstreams whose config says discovery: {provider: NAME}.
	Providers map[string]discovery.Provider
	// Clock, when set, replaces time.Now for the balancers' warm-up and
	// ejection timing (tests).
	Clock func() time.Time
}

// Gateway is a running reverse proxy. Build it with New, start it with
// Start (or Run), stop it with Shutdown.
type Gateway struct {
	opts    Options
	log     *slog.Logger
	access  *slog.Logger // nil when off
	accessW *asyncWriter
	metrics *metrics

	mu sync.Mutex // serialises reloads and admin changes
	rt atomic.Pointer[liveConfig]

	poolMu sync.Mutex
	pools  map[string]*pool

	healthClient *http.Client
	healthMu     sync.Mutex // one active-check verdict at a time (healthLog)
	ridPrefix    string
	ridCtr       atomic.Uint64

	ln, adminLn net.Listener
	slow        *http.Server
	slowTr      atomic.Pointer[http.Transport] // the net/http path's, swapped when a reload changes timeouts
	handoff     *handoffListener
	h2          *h2srv.Server // HTTP/2 over TLS, unless http2_server is net/http (accept_tls.go)
	admin       *http.Server
	tlsConf     *tls.Config

	connMu   sync.Mutex
	conns    map[*clientConn]struct{}
	connWG   sync.WaitGroup
	draining atomic.Bool
	stop     chan struct{}
	bgWG     sync.WaitGroup
	ccPool   sync.Pool
	loops    []*evloop // the event loops, when they own the listener (loop_linux.go)
	addr     net.Addr
	// loopConns counts the loops' client connections (g.conns holds the
	// goroutine path's).
	loopConns atomic.Int64
	// Packing (loop_pack_linux.go): how many loops are active, a count
	// a test fixes (0: the packer decides), connections moved between
	// loops, and the packer's stop and end.
	activeLoops atomic.Int32
	packFixed   atomic.Int32
	loopMoves   atomic.Int64
	steered     atomic.Int32 // the active count the listeners' steering program has (loop_pack_linux.go)
	packStop    chan struct{}
	packDone    chan struct{}
	disc        watchers // discovery providers (sources.go)
}

// Check reports what New would refuse in cfg, without starting anything
// or asking any source: the TLS certificate, upstream TLS files, strategy
// settings, and discovery providers (a provider name not among
// opts.Providers, a DNS source with no server to ask). `fulcrum gateway
// --check` runs it.
func Check(cfg *config.Config, opts Options) error {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if cfg.TLS != nil {
		if _, err := tls.LoadX509KeyPair(cfg.TLS.CertFile, cfg.TLS.KeyFile); err != nil {
			return fmt.Errorf("tls: %w", err)
		}
	}
	g := &Gateway{opts: opts, log: opts.Logger}
	if _, err := g.providers(cfg); err != nil {
		return err
	}
	rt, err := g.build(cfg, nil)
	if err != nil {
		return err
	}
	for _, u := range rt.order {
		if u.tls != nil {
			u.tls.CloseIdleConnections()
		}
	}
	return nil
}

// New makes cfg live (balancers, pools, health checks)
// without listening yet.
func New(cfg *config.Config, opts Options) (*Gateway, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	var rb [6]byte
	_, _ = rand.Read(rb[:])
	g := &Gateway{
		opts:         opts,
		log:          opts.Logger,
		pools:        map[string]*pool{},
		healthClient: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}},
		ridPrefix:    hex.EncodeToString(rb[:]),
		conns:        map[*clientConn]struct{}{},
		stop:         make(chan struct{}),
	}
	g.metrics = newMetrics(g.upstreams)
	g.metrics.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fulcrum_gateway_event_loops_active",
			Help: "Event loops new connections go to (the packer's count; 0 with the loops off).",
		}, func() float64 { return float64(g.loopsActive()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "fulcrum_gateway_event_loop_moves_total",
			Help: "Client connections moved between event loops, between two requests.",
		}, func() float64 { return float64(g.loopMoves.Load()) }),
	)
	if err := g.setupAccessLog(cfg); err != nil {
		return nil, err
	}
	if cfg.TLS != nil {
		cert, err := tls.LoadX509KeyPair(cfg.TLS.CertFile, cfg.TLS.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		g.tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
	}
	g.setSlowTransport(cfg)
	// The first liveConfig needs a config for pool() before it is published.
	g.rt.Store(&liveConfig{cfg: cfg})
	ps, err := g.providers(cfg)
	if err != nil {
		return nil, err
	}
	rt, err := g.build(cfg, nil)
	if err != nil {
		return nil, err
	}
	for _, u := range rt.order {
		if err := g.applySet(u, reloadSet(u, nil)); err != nil {
			return nil, fmt.Errorf("upstreams.%s.targets: %w", u.name, err)
		}
	}
	g.rt.Store(rt)
	g.mu.Lock()
	first := g.syncWatchers(rt, ps)
	g.mu.Unlock()
	awaitFirst(first)
	return g, nil
}

func (g *Gateway) setupAccessLog(cfg *config.Config) error {
	if !cfg.AccessLog.On() {
		return nil
	}
	w := g.opts.AccessLog
	if w == nil {
		switch cfg.AccessLog.Path {
		case "", "stdout":
			w = os.Stdout
		case "stderr":
			w = os.Stderr
		default:
			f, err := os.OpenFile(cfg.AccessLog.Path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return fmt.Errorf("access_log.path: %w", err)
			}
			w = f
		}
	}
	// Lines go through a buffer a goroutine of its own writes out: a
	// slow disk or a full pipe never holds a request (nor an event loop).
	g.accessW = newAsyncWriter(w, g.metrics.logDropped)
	if cfg.AccessLog.Format == "json" {
		g.access = slog.New(slog.NewJSONHandler(g.accessW, nil))
	} else {
		g.access = slog.New(slog.NewTextHandler(g.accessW, nil))
	}
	return nil
}

func (g *Gateway) cfg() *config.Config { return g.rt.Load().cfg }

func (g *Gateway) upstreams() []*upstream { return g.rt.Load().order }

// Start listens on the proxy and admin addresses and serves in the
// background.
func (g *Gateway) Start() error {
	cfg := g.cfg()
	if g.loopServes() {
		addr, err := g.listenLoops(cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen: %w", err)
		}
		g.addr = addr
	} else {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen: %w", err)
		}
		g.ln, g.addr = ln, ln.Addr()
		if err := g.startTLSLoops(); err != nil {
			ln.Close()
			return fmt.Errorf("listen: %w", err)
		}
	}
	if cfg.Admin.Listen != "off" {
		al, err := net.Listen("tcp", cfg.Admin.Listen)
		if err != nil {
			g.closeListeners()
			return fmt.Errorf("admin.listen: %w", err)
		}
		g.adminLn = al
		g.admin = &http.Server{Handler: g.adminHandler(), ReadHeaderTimeout: 10 * time.Second}
		g.bgWG.Add(1)
		go func() {
			defer g.bgWG.Done()
			_ = g.admin.Serve(al)
		}()
	}
	g.slow = g.newSlowServer()
	if g.tlsConf != nil {
		// TLS connections reach net/http only from the fast path's accept
		// loop (accept_tls.go): HTTP/2 as a bare *tls.Conn, handed-off
		// HTTP/1.1 wrapped, with its TLS state passed on.
		g.slow.ConnContext = handedOffConnContext
		g.slow.Handler = handedOffTLS(g.slow.Handler)
		if g.ownH2() {
			g.h2 = &h2srv.Server{Handler: g.slow.Handler, Log: g.log}
		}
	}
	g.handoff = &handoffListener{ch: make(chan net.Conn), done: make(chan struct{}), addr: g.addr}
	g.bgWG.Add(2)
	go func() {
		defer g.bgWG.Done()
		_ = g.slow.Serve(g.handoff)
	}()
	go func() {
		defer g.bgWG.Done()
		g.sweepLoop()
	}()
	if g.ln != nil {
		g.bgWG.Add(1)
		go func() {
			defer g.bgWG.Done()
			g.acceptLoop(g.ln)
		}()
	}
	g.runLoops()
	g.log.Info("gateway listening", "listen", g.addr.String(), "admin", g.AdminAddr(), "event_loops", len(g.loops))
	return nil
}

// closeListeners closes the proxy's listeners: a failed Start's.
func (g *Gateway) closeListeners() {
	if g.ln != nil {
		g.ln.Close()
	}
	g.closeLoops() // not running yet
}

// EventLoops is how many event loops own the listener (0: the goroutine
// path serves every connection).
func (g *Gateway) EventLoops() int { return len(g.loops) }

// loopsActive is how many loops take new connections: the packer's
// count, all of them with one loop, none with the loops off.
func (g *Gateway) loopsActive() int {
	if len(g.loops) <= 1 {
		return len(g.loops)
	}
	return int(g.activeLoops.Load())
}

// Addr is the proxy's listening address.
func (g *Gateway) Addr() string { return g.addr.String() }

// AdminAddr is the admin listener's address ("" when off).
func (g *Gateway) AdminAddr() string {
	if g.adminLn == nil {
		return ""
	}
	return g.adminLn.Addr().String()
}

// Run starts the gateway and serves until ctx ends, then drains within
// the configured shutdown grace.
func (g *Gateway) Run(ctx context.Context) error {
	if err := g.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), g.cfg().ShutdownGrace.D())
	defer cancel()
	return g.Shutdown(sctx)
}

func (g *Gateway) sweepLoop() {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case now := <-t.C:
			g.poolMu.Lock()
			ps := make([]*pool, 0, len(g.pools))
			for _, p := range g.pools {
				ps = append(ps, p)
			}
			g.poolMu.Unlock()
			for _, p := range ps {
				p.sweep(now)
			}
		}
	}
}

// Shutdown stops accepting, lets in-flight requests finish until ctx
// ends, then closes whatever is left.
func (g *Gateway) Shutdown(ctx context.Context) error {
	if !g.draining.CompareAndSwap(false, true) {
		return nil
	}
	if g.ln != nil {
		g.ln.Close()
	}
	g.drainLoops(false)
	// Wake connections waiting for their next request; busy ones close
	// after their current response.
	g.connMu.Lock()
	for cc := range g.conns {
		if cc.idle.Load() {
			_ = cc.c.SetReadDeadline(time.Unix(1, 0))
		}
	}
	g.connMu.Unlock()
	if g.h2 != nil {
		g.h2.Shutdown() // GOAWAY: streams in flight finish, then each connection closes
	}
	var slowErr error
	slowDone := make(chan struct{})
	go func() {
		defer close(slowDone)
		if g.slow != nil {
			slowErr = g.slow.Shutdown(ctx)
		}
	}()
	fastDone := make(chan struct{})
	go func() {
		g.connWG.Wait()
		close(fastDone)
	}()
	var err error
	select {
	case <-fastDone:
	case <-ctx.Done():
		err = fmt.Errorf("gateway: drain: %w", ctx.Err())
		g.drainLoops(true)
		g.connMu.Lock()
		for cc := range g.conns {
			cc.c.Close()
			if uc := cc.busy.Load(); uc != nil {
				_ = uc.c.SetDeadline(time.Unix(1, 0)) // a hung target must not hold the exit
			}
		}
		g.connMu.Unlock()
		<-fastDone
	}
	g.stopLoops(true)
	<-slowDone
	if g.slow != nil {
		g.slow.Close()
	}
	if g.handoff != nil {
		g.handoff.Close()
	}
	close(g.stop)
	if g.admin != nil {
		g.admin.Close()
	}
	g.stopWatchers()
	// Under g.mu: a reload or an admin change still applying finishes
	// first, and any later one sees draining and starts no checker.
	g.mu.Lock()
	for _, u := range g.upstreams() {
		u.checker.Swap(nil).Stop()
	}
	g.mu.Unlock()
	g.bgWG.Wait()
	g.poolMu.Lock()
	for _, p := range g.pools {
		p.close()
	}
	g.poolMu.Unlock()
	g.rt.Load().closeLimiters(nil)
	if g.accessW != nil {
		g.accessW.close() // the lines of the drain are written before Shutdown returns
	}
	if err == nil && slowErr != nil {
		err = fmt.Errorf("gateway: drain: %w", slowErr)
	}
	return err
}

// Reload reads the config file again and applies it; on any error the
// running configuration stays as it was.
func (g *Gateway) Reload() error {
	if g.opts.ConfigPath == "" {
		return errors.New("reload: the gateway was not started from a config file")
	}
	cfg, err := config.LoadWith(g.opts.ConfigPath, g.opts.Override)
	if err != nil {
		return err
	}
	return g.ApplyConfig(cfg)
}

// ApplyConfig replaces the running configuration with cfg (already
// validated by config.Parse). Upstreams that stay with the same strategy
// keep their balancer and so every target's state; new targets warm up.
// Settings bound at start (listen, admin, tls, h2c, access_log) cannot
// change without a restart and are refused.
func (g *Gateway) ApplyConfig(cfg *config.Config) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.draining.Load() {
		// Shutdown has stopped, or is stopping, the watchers and checkers
		// a new config would start.
		return errors.New("reload: the gateway is shutting down")
	}
	old := g.rt.Load()
	if err := restartOnly(old.cfg, cfg); err != nil {
		return err
	}
	ps, err := g.providers(cfg)
	if err != nil {
		return err
	}
	rt, err := g.build(cfg, old)
	if err != nil {
		return err
	}
	// Check every target set before changing anything.
	for _, u := range rt.order {
		if err := checkTargets(u.cfg.Targets); err != nil {
			rt.closeLimiters(old) // the rate limiters this config made
			return fmt.Errorf("upstreams.%s.targets: %w", u.name, err)
		}
	}
	for _, u := range rt.order {
		ou := old.ups[u.name]
		switch {
		case u.reconfigure:
			o := balanceOptions(u.cfg)
			o.Clock = g.opts.Clock
			if err := u.bal.Reconfigure(o); err != nil {
				// Not reached after build's check.
				g.log.Error("reload: strategy settings", "upstream", u.name, "err", err)
			} else {
				g.log.Info("reload: strategy settings applied", "upstream", u.name, "strategy", u.cfg.Strategy,
					"kept", "learned limits, latency means, warm-up, health and ejections")
			}
		case ou != nil && ou.bal != u.bal:
			g.log.Info("reload: balancer rebuilt", "upstream", u.name, "strategy", u.cfg.Strategy,
				"cause", "strategy changed from "+ou.cfg.Strategy+": learned limits, latency means and warm-up start over")
		}
		if ou != nil && ou.bal == u.bal {
			u.bal.SetLIFOAfter(u.cfg.Queue.LIFO())
			u.targets.Store(ou.targets.Load()) // keep pools and metric handles
			// and the active checks: startChecks keeps them if the check
			// is unchanged (its verdicts go to the same balancer).
			u.checker.Store(ou.checker.Swap(nil))
		}
		if err := g.applySet(u, reloadSet(u, old.ups[u.name])); err != nil {
			// Not reached after checkTargets; keep going rather than
			// leave half the upstreams on the old set.
			g.log.Error("reload: apply targets", "upstream", u.name, "err", err)
		}
	}
	if t, ot := cfg.Timeouts, old.cfg.Timeouts; t.Dial != ot.Dial || t.UpstreamIdle != ot.UpstreamIdle || t.ResponseHeader != ot.ResponseHeader {
		// Both transports: the fast path's pools (response_header is read
		// per request) and net/http's transport, swapped whole.
		g.poolMu.Lock()
		for _, p := range g.pools {
			p.setTimeouts(t.Dial.D(), t.UpstreamIdle.D())
		}
		g.poolMu.Unlock()
		g.setSlowTransport(cfg)
	}
	g.rt.Store(rt)
	old.closeLimiters(rt)
	g.syncWatchers(rt, ps)
	for _, ou := range old.order {
		ou.checker.Swap(nil).Stop()
		if ou.tls != nil {
			// build made each https upstream a new transport (its files
			// read again): the old one's idle connections would otherwise
			// stay open until upstream_idle.
			ou.tls.CloseIdleConnections()
		}
	}
	g.log.Info("config applied", "upstreams", len(rt.order), "routes", len(rt.router.all))
	return nil
}

func checkTargets(ts []config.Target) error {
	seen := map[string]bool{}
	for i, t := range ts {
		if seen[t.Addr] {
			return fmt.Errorf("[%d].url: %s appears twice", i, t.URL)
		}
		seen[t.Addr] = true
	}
	return nil
}

func restartOnly(a, b *config.Config) error {
	var diff []string
	if a.Listen != b.Listen {
		diff = append(diff, "listen")
	}
	if a.Admin != b.Admin {
		diff = append(diff, "admin")
	}
	if (a.TLS == nil) != (b.TLS == nil) || (a.TLS != nil && *a.TLS != *b.TLS) {
		diff = append(diff, "tls")
	}
	if a.H2C != b.H2C {
		diff = append(diff, "h2c")
	}
	if a.EventLoopOn() != b.EventLoopOn() {
		diff = append(diff, "event_loop")
	}
	if a.HTTP2Server != b.HTTP2Server {
		diff = append(diff, "http2_server")
	}
	if a.AccessLog.On() != b.AccessLog.On() || a.AccessLog.Format != b.AccessLog.Format || a.AccessLog.Path != b.AccessLog.Path {
		diff = append(diff, "access_log")
	}
	if a.MaxHeaderSize != b.MaxHeaderSize {
		diff = append(diff, "max_header_size")
	}
	// net/http's server reads these without a lock while it serves, so
	// they cannot change under it; the fast path would take them alone.
	if a.Timeouts.ReadHeader != b.Timeouts.ReadHeader {
		diff = append(diff, "timeouts.read_header")
	}
	if a.Timeouts.Idle != b.Timeouts.Idle {
		diff = append(diff, "timeouts.idle")
	}
	if len(diff) > 0 {
		return fmt.Errorf("reload: %v changed; these take effect only on restart (nothing was applied)", diff)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
