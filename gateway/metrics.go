package gateway

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

// metrics are the gateway's Prometheus metrics, on a registry of its own.
type metrics struct {
	reg         *prometheus.Registry
	own         []prometheus.Collector // the gateway's own, each family of which exists from the start (test)
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	retries     *prometheus.CounterVec
	retryDenied *prometheus.CounterVec
	logDropped  prometheus.Counter
	queued      *prometheus.CounterVec
	queueWait   *prometheus.HistogramVec
	waiting     *prometheus.GaugeVec
	checks      *prometheus.CounterVec
	ejections   *prometheus.CounterVec
	discovery   *prometheus.CounterVec
	rateLimited *prometheus.CounterVec
	rateDropped *prometheus.CounterVec
	splitPicks  *prometheus.CounterVec
}

func newMetrics(targets func() []*upstream) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fulcrum_gateway_requests_total",
			Help: "Requests answered, by upstream, target (empty when the gateway answered itself) and status code.",
		}, []string{"upstream", "target", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fulcrum_gateway_request_duration_seconds",
			Help:    "Time from the request head to the end of the response, by upstream and target.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"upstream", "target"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fulcrum_gateway_retries_total",
			Help: "Retries to another target, by upstream and reason (connect_error, reset, timeout, status).",
		}, []string{"upstream", "reason"}),
		retryDenied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fulcrum_gateway_retries_denied_total",
			Help: "Retries the retry budget refused, by upstream.",
		}, []string{"upstream"}),
		logDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fulcrum_gateway_access_log_dropped_total",
			Help: "Access lines dropped because the log's writer fell behind by more than its buffer.",
		}),
		queued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fulcrum_gateway_queue_waits_total",
			Help: "Requests that waited for capacity, by upstream and outcome (served, timeout, client_gone).",
		}, []string{"upstream", "outcome"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fulcrum_gateway_queue_wait_seconds",
			Help:    "Time requests waited for capacity, by upstream.",
			Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"upstream"}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fulcrum_gateway_health_checks_total",
			Help: "Active health check probes, by upstream, target and result (ok, fail).",
		}, []string{"upstream", "target", "result"}),
	}
	m.ejections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fulcrum_gateway_ejections_total",
		Help: "Passive ejections of a target (consecutive failures), by upstream and target.",
	}, []string{"upstream", "target"})
	m.discovery = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fulcrum_gateway_discovery_updates_total",
		Help: "Target lists from discovery sources, by upstream, source and result (applied, refused).",
	}, []string{"upstream", "source", "result"})
	m.waiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fulcrum_gateway_queue_waiting",
		Help: "Requests waiting for capacity now, by upstream.",
	}, []string{"upstream"})
	m.rateLimited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fulcrum_gateway_rate_limited_total",
		Help: "Requests a route's rate limit answered with 429, by route (its index in the file) and upstream.",
	}, []string{"route", "upstream"})
	m.rateDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fulcrum_gateway_rate_limit_keys_dropped_total",
		Help: "Rate-limit buckets dropped to keep a route under its max_keys (least recently seen first), by route.",
	}, []string{"route"})
	m.splitPicks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fulcrum_gateway_split_requests_total",
		Help: "Requests a route's weighted split sent to each side, by route (its index in the file) and upstream; the side's statuses are in fulcrum_gateway_requests_total.",
	}, []string{"route", "upstream"})
	m.own = []prometheus.Collector{m.logDropped, m.splitPicks, m.rateLimited, m.rateDropped, m.waiting, m.ejections, m.discovery, m.requests, m.duration, m.retries, m.retryDenied, m.queued, m.queueWait, m.checks,
		&targetCollector{targets: targets}}
	m.reg.MustRegister(m.own...)
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// targetMetrics caches a target's metric children so a request costs no
// label lookup.
type targetMetrics struct {
	m        *metrics
	up, addr string
	dur      prometheus.Observer
	codes    [600]atomic.Pointer[prometheus.Counter]
}

func (m *metrics) target(up, addr string) *targetMetrics {
	// The target's series exist from the start, at 0: dashboards and
	// alerts can be built before the first error.
	m.requests.WithLabelValues(up, addr, "200")
	m.ejections.WithLabelValues(up, addr)
	m.checks.WithLabelValues(up, addr, "ok")
	m.checks.WithLabelValues(up, addr, "fail")
	return &targetMetrics{m: m, up: up, addr: addr, dur: m.duration.WithLabelValues(up, addr)}
}

// upstream makes an upstream's series exist at 0 from the start (or its
// addition by a reload): its retries by reason, the budget's refusals,
// the queue, discovery updates, and the answers the gateway makes itself
// (502, 503, 504). nil-safe: Check builds upstreams without metrics.
func (m *metrics) upstream(name string, u *config.Upstream) {
	if m == nil {
		return
	}
	for _, r := range []string{"connect_error", "reset", "timeout", "status", "requeue"} {
		m.retries.WithLabelValues(name, r)
	}
	m.retryDenied.WithLabelValues(name)
	for _, o := range []string{"served", "timeout", "client_gone"} {
		m.queued.WithLabelValues(name, o)
	}
	m.queueWait.WithLabelValues(name)
	m.waiting.WithLabelValues(name)
	for _, code := range []string{"502", "503", "504"} {
		m.requests.WithLabelValues(name, "", code)
	}
	// A Go provider names its own source (Provider.Source); the built-in
	// ones are named by their kind.
	if d := u.Discovery; d != nil && d.Provider == "" {
		for _, r := range []string{"applied", "refused"} {
			m.discovery.WithLabelValues(name, d.Kind(), r)
		}
	}
}

func (t *targetMetrics) count(code int) {
	if code < 0 || code >= len(t.codes) {
		code = 0
	}
	if c := t.codes[code].Load(); c != nil {
		(*c).Inc()
		return
	}
	c := t.m.requests.WithLabelValues(t.up, t.addr, strconv.Itoa(code))
	t.codes[code].Store(&c)
	c.Inc()
}

// countLocal counts a response the gateway made itself (no route, no
// target, at capacity, all attempts failed) under target "".
func (g *Gateway) countLocal(up *upstream, code int) {
	name := ""
	if up != nil {
		name = up.name
	}
	g.metrics.requests.WithLabelValues(name, "", strconv.Itoa(code)).Inc()
}

// targetCollector reports the balancers' live per-target state at scrape
// time, so the hot path keeps no gauges of its own.
type targetCollector struct {
	targets func() []*upstream
}

var (
	descInFlight = prometheus.NewDesc("fulcrum_gateway_in_flight", "Requests in flight to a target.", []string{"upstream", "target"}, nil)
	descHealthy  = prometheus.NewDesc("fulcrum_gateway_target_healthy", "1 when the target passes active health checks.", []string{"upstream", "target"}, nil)
	descEjected  = prometheus.NewDesc("fulcrum_gateway_target_ejected", "1 while passive ejection holds the target out.", []string{"upstream", "target"}, nil)
	descWeight   = prometheus.NewDesc("fulcrum_gateway_target_effective_weight", "Weight with warm-up applied (0 when out of rotation).", []string{"upstream", "target"}, nil)
	descLatency  = prometheus.NewDesc("fulcrum_gateway_target_latency_avg_seconds", "Moving average of the target's latency.", []string{"upstream", "target"}, nil)
)

func (c *targetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInFlight, descHealthy, descEjected, descWeight, descLatency} {
		ch <- d
	}
}

func (c *targetCollector) Collect(ch chan<- prometheus.Metric) {
	for _, u := range c.targets() {
		for _, e := range u.bal.Endpoints() {
			addr := e.Target.Addr
			ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(e.InFlight), u.name, addr)
			ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, b2f(e.Healthy), u.name, addr)
			ch <- prometheus.MustNewConstMetric(descEjected, prometheus.GaugeValue, b2f(e.Ejected), u.name, addr)
			ch <- prometheus.MustNewConstMetric(descWeight, prometheus.GaugeValue, float64(e.EffectiveWeight), u.name, addr)
			ch <- prometheus.MustNewConstMetric(descLatency, prometheus.GaugeValue, e.AvgLatency.Seconds(), u.name, addr)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
