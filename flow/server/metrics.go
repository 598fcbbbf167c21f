package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fulcrum-lb/fulcrum/flow/store"
)

// metrics are the server's Prometheus series, in a registry of its own so
// that several servers can live in one process (tests).
type metrics struct {
	reg      *prometheus.Registry
	own      []prometheus.Collector // the server's own, each family of which exists from the start (test)
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	created  *prometheus.CounterVec
	held     *prometheus.CounterVec
	set      *prometheus.CounterVec
	rescued  prometheus.Counter
	pruned   prometheus.Counter
	wait     *prometheus.HistogramVec
}

func newMetrics(st store.Store) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulcrum_flow_http_requests_total",
			Help: "HTTP requests by endpoint and status code."}, []string{"endpoint", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fulcrum_flow_http_request_duration_seconds",
			Help: "HTTP request duration by endpoint (hold_tasks includes its wait).", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}, []string{"endpoint"}),
		created: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulcrum_flow_tasks_created_total",
			Help: "Tasks created, by type."}, []string{"task_type"}),
		held: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulcrum_flow_tasks_held_total",
			Help: "Tasks handed to workers by hold_tasks, by type."}, []string{"task_type"}),
		set: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulcrum_flow_tasks_set_total",
			Help: "set_task outcomes by result (ok, stale, not_found, invalid)."}, []string{"result"}),
		rescued: prometheus.NewCounter(prometheus.CounterOpts{Name: "fulcrum_flow_leases_expired_total",
			Help: "Held tasks whose lease expired and were returned to pending or failed."}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{Name: "fulcrum_flow_tasks_pruned_total",
			Help: "Finished tasks deleted after the retention."}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fulcrum_flow_queue_wait_seconds",
			Help:    "How long held tasks waited between becoming due (order_time) and being held, by type.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12)}, []string{"task_type"}),
	}
	m.own = []prometheus.Collector{m.requests, m.latency, m.created, m.held, m.set, m.rescued, m.pruned, m.wait, &taskGauge{st: st, m: m}}
	m.reg.MustRegister(m.own...)
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every family from the start, at 0, so dashboards and alerts can be
	// built before the first event: the set results here, each endpoint
	// as handle wraps it, each task type as it becomes known (taskType).
	for _, r := range []string{"ok", "stale", "not_found", "invalid"} {
		m.set.WithLabelValues(r)
	}
	return m
}

// endpoint makes an endpoint's series exist at 0.
func (m *metrics) endpoint(name string) {
	m.requests.WithLabelValues(name, "200")
	m.latency.WithLabelValues(name)
}

// taskType makes a task type's series exist at 0. The server calls it for
// the types in the database at start and for each type registered; a
// scrape does for every type the database has (another server may have
// registered it).
func (m *metrics) taskType(name string) {
	m.created.WithLabelValues(name)
	m.held.WithLabelValues(name)
	m.wait.WithLabelValues(name)
}

// taskGauge reports the task counts by type and status, read from the
// database at scrape time (all servers see the same numbers).
type taskGauge struct {
	st store.Store
	m  *metrics
}

var (
	taskDesc   = prometheus.NewDesc("fulcrum_flow_tasks", "Tasks in the database by type and status.", []string{"task_type", "status"}, nil)
	oldestDesc = prometheus.NewDesc("fulcrum_flow_oldest_pending_age_seconds",
		"How long the oldest due pending task of the type has been due (0 when none is due).", []string{"task_type"}, nil)
)

func (g *taskGauge) Describe(ch chan<- *prometheus.Desc) { ch <- taskDesc; ch <- oldestDesc }

func (g *taskGauge) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stats, err := g.st.Stats(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(taskDesc, err)
		return
	}
	now := time.Now()
	for _, t := range stats {
		g.m.taskType(t.TaskType)
		for status, n := range t.Counts { // every status, 0 included (Store.Stats)
			ch <- prometheus.MustNewConstMetric(taskDesc, prometheus.GaugeValue, float64(n), t.TaskType, status)
		}
		// One index lookup per type (the claim index's first entry).
		next, ok, err := g.st.NextDue(ctx, t.TaskType)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(oldestDesc, err)
			continue
		}
		age := 0.0
		if ok && next.Before(now) {
			age = now.Sub(next).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age, t.TaskType)
	}
}
