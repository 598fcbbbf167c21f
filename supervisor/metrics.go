package supervisor

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fulcrum-lb/fulcrum/supervisor/leadership"
	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
)

// view is the state the gauges show, refreshed by the event loop after each
// event that can change it (payloads do not), so scrapes take no lock.
type view struct {
	phase                                  Phase
	workers, tasks, deficitTasks, missing  int
	connections, timers                    int
	engine                                 EngineStats
	deaths, taskTimeouts, queries, qErrors uint64
}

type metrics struct {
	reg          *prometheus.Registry
	own          []prometheus.Collector // every collector registered, each family of which exists from the start (test)
	view         atomic.Pointer[view]
	messages     *prometheus.CounterVec
	rejected     *prometheus.CounterVec
	payloads     *prometheus.CounterVec
	instructions prometheus.Counter
	undelivered  prometheus.Counter
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.view.Store(&view{})
	register := func(cs ...prometheus.Collector) {
		m.own = append(m.own, cs...)
		m.reg.MustRegister(cs...)
	}
	const ns, sub = "fulcrum", "supervisor"
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: ns, Subsystem: sub, Name: name, Help: help}
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts(opts(name, help)), labels)
		register(c)
		return c
	}
	m.messages = counter("messages_total", "Worker messages accepted, by type.", "type")
	m.rejected = counter("rejected_total", "Worker messages and connections rejected, by reason (unauthorized, invalid, identity).", "reason")
	m.payloads = counter("payloads_total", "Payloads by result: published (first within the dedup window), duplicate, unknown_task.", "result")
	m.instructions = prometheus.NewCounter(prometheus.CounterOpts(opts("instructions_total", "Instruction sets sent to workers.")))
	m.undelivered = prometheus.NewCounter(prometheus.CounterOpts(opts("instructions_undelivered_total", "Instruction sets for workers not connected or too slow (they get their whole assignment on reconnect).")))
	register(m.instructions, m.undelivered)
	// Every label value known in advance exists from the start, at 0, so
	// dashboards and alerts can be built before the first event.
	for _, t := range []string{protocol.TypeReport, protocol.TypePayload} {
		m.messages.WithLabelValues(t)
	}
	for _, r := range []string{"unauthorized", "invalid", "identity"} {
		m.rejected.WithLabelValues(r)
	}
	for _, r := range []string{"published", "duplicate", "unknown_task"} {
		m.payloads.WithLabelValues(r)
	}

	v := func() *view { return m.view.Load() }
	gauge := func(name, help string, f func() float64) {
		register(prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts(name, help)), f))
	}
	gauge("running", "1 once warm-up is over and tasks are assigned, 0 while warming up.", func() float64 { return float64(v().phase) })
	gauge("workers", "Live workers.", func() float64 { return float64(v().workers) })
	gauge("tasks", "Supervised tasks.", func() float64 { return float64(v().tasks) })
	gauge("deficit_tasks", "Tasks with fewer than k holders.", func() float64 { return float64(v().deficitTasks) })
	gauge("deficit_holders", "Holdings missing to give every task k holders.", func() float64 { return float64(v().missing) })
	gauge("connections", "Open worker connections.", func() float64 { return float64(v().connections) })
	gauge("timers", "Timeouts armed on the timer wheel.", func() float64 { return float64(v().timers) })
	cfunc := func(name, help string, f func() float64) {
		register(prometheus.NewCounterFunc(prometheus.CounterOpts(opts(name, help)), f))
	}
	cfunc("holdings_placed_total", "Holdings created (a task started on a worker).", func() float64 { return float64(v().engine.Placed) })
	cfunc("holdings_vacated_total", "Holdings lost to a dead worker, a silent task or a lowered max load.", func() float64 { return float64(v().engine.Vacated) })
	cfunc("holdings_moved_total", "Holdings moved by rebalancing.", func() float64 { return float64(v().engine.Moved) })
	cfunc("holdings_adopted_total", "Running sessions a worker reported that were adopted as holdings.", func() float64 { return float64(v().engine.Adopted) })
	cfunc("worker_deaths_total", "Workers declared dead after worker_timeout.", func() float64 { return float64(v().deaths) })
	cfunc("task_timeouts_total", "Holdings vacated after task_timeout.", func() float64 { return float64(v().taskTimeouts) })
	cfunc("queries_total", "Task queries.", func() float64 { return float64(v().queries) })
	cfunc("query_errors_total", "Task queries that failed.", func() float64 { return float64(v().qErrors) })
	cfunc("sink_published_total", "Payloads the sink delivered.", func() float64 { return float64(s.sink.Published()) })
	cfunc("sink_dropped_total", "Payloads the sink dropped (buffer full, or undeliverable at shutdown).", func() float64 { return float64(s.sink.Dropped()) })
	gauge("leader", "1 while this supervisor assigns tasks (leading, or running alone), 0 while standing by.", func() float64 {
		if s.el.State().Role == leadership.Standby {
			return 0
		}
		return 1
	})
	gauge("term", "The leadership term this supervisor leads (high availability), 0 when it does not.", func() float64 { return float64(s.el.Term()) })
	gauge("dedup_entries", "Payload keys the deduper remembers.", func() float64 { return float64(s.dedup.Len()) })
	return m
}

// refresh is called from the event loop.
func (m *metrics) refresh(s *Server) {
	c := s.core
	w, t, d, missing := c.Engine().Counts()
	m.view.Store(&view{
		phase: c.Phase(), workers: w, tasks: t, deficitTasks: d, missing: missing,
		connections: len(s.conns), timers: c.Timers(), engine: c.Engine().Stats(),
		deaths: c.WorkerDeaths, taskTimeouts: c.TaskTimeouts, queries: c.Queries, qErrors: c.QueryErrors,
	})
}
