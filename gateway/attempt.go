package gateway

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
	"github.com/fulcrum-lb/fulcrum/balance/probe"
	"github.com/fulcrum-lb/fulcrum/gateway/health"
	"github.com/fulcrum-lb/fulcrum/gateway/internal/h1"
)

// The attempt loop: one request's tries at an upstream's targets, shared
// by both transports (fast path and net/http). Each turn picks a target,
// lets the transport exchange the request with it, and decides: relay
// the response, try another target, or answer for the gateway. Only the
// I/O differs between transports; picking, the retry rule, the final
// status and the report to the balancer are here and nowhere else.
// Modelled on Caddy's reverseproxy proxyLoopIteration and tryAgain.

// exchanger is a transport's I/O for one request.
type exchanger interface {
	// exchange sends the request to t and reads the response head. It
	// returns the status (0 with an error), and written: whether any byte
	// of the request was accepted by a connection to t (then the request
	// may have run there).
	// headTO bounds the wait for the response head (upstream.headTimeout).
	exchange(ctx context.Context, t *target, start time.Time, headTO time.Duration) (status int, written bool, err error)
	// drop discards the response exchange read, before a retry.
	drop(t *target)
	// watch returns a context that ends when the client leaves, for the
	// waits that could outlive it; stop ends the watch.
	watch(ctx context.Context) (_ context.Context, stop func())
	// loadHeader is the response's Fulcrum-Load value (nil: none), for
	// strategies that read targets' own load reports (probe).
	loadHeader() []byte
}

// request is one request's state in the attempt loop.
type request struct {
	up  *upstream
	key string // the hash key, when the strategy uses one
	// replayable: the request may run twice (idempotent method or an
	// Idempotency-Key header) and its body can be sent again (none, or
	// buffered): condition (b) of the replay rule.
	replayable bool
	start      time.Time
	tried      []*balance.Endpoint
	retries    int  // retries made
	waited     bool // the last pick waited in the queue
	// requeue: the next pick is a refusal's requeue (attempt.requeue),
	// which may go back to a target that refused it once every target
	// has (pickNow).
	requeue bool
}

// result is how the attempt loop ended: a target's response to relay
// (t set), or an answer the gateway makes itself (code, reason).
type result struct {
	t      *target
	pick   balance.Pick
	tstart time.Time // the last attempt's start
	status int
	// outcome is what the target's answer counts as for the balancer: a
	// retried status is a failure even when it is relayed.
	outcome error

	code   int    // the gateway's own status (502, 503, 504)
	reason string // why: connect_error, reset, timeout, at_capacity, no_target, budget
}

// Reasons a gateway-made answer gives, in its body and the access log.
const (
	reasonConnect     = "connect_error"
	reasonReset       = "reset"
	reasonTimeout     = "timeout"
	reasonAtCapacity  = "at_capacity"
	reasonNoTarget    = "no_target"
	reasonBudget      = "budget"
	reasonRateLimited = "rate_limited"
	// reasonClientGone: the client left before the response began. Logged
	// and counted with nginx's 499, written to nobody.
	reasonClientGone = "client_gone"
)

// statusClientGone is nginx's status for a request whose client closed
// the connection before the response: never sent, logged and counted.
const statusClientGone = 499

// errStatus marks a response whose status counts as a failure.
type errStatus int

func (e errStatus) Error() string { return "status " + strconv.Itoa(int(e)) }

// Rejected: a 503 or 429 says the target had no capacity for the request
// (balance.Refused), which the capacity strategy learns its limit from.
func (e errStatus) Rejected() bool { return e == 503 || e == 429 }

// timeoutError is a failure by silence: the target did not answer in
// time. Its Timeout method says so to the balancer (balance.IsTimeout),
// which keeps its length out of the target's mean latency.
type timeoutError string

func (e timeoutError) Error() string { return string(e) }
func (timeoutError) Timeout() bool   { return true }

var errTimeout error = timeoutError("response header timeout")

// errSwitched is a 101 the request did not ask for (or to another
// protocol than it asked for): nothing to relay, and the connection
// speaks something else now.
var errSwitched = errors.New("target switched protocols unasked")

// connectError is a failure to reach a target: nothing was sent.
type connectError struct {
	addr string
	err  error
}

func (e *connectError) Error() string { return "connect " + e.addr + ": " + e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

// classify names a failed exchange: the reason and the status the
// gateway answers with when no retry follows.
func classify(err error) (string, int) {
	var ce *connectError
	var ne net.Error
	switch {
	case errors.As(err, &ce):
		return reasonConnect, 502
	case errors.Is(err, errTimeout), errors.As(err, &ne) && ne.Timeout():
		return reasonTimeout, 504
	}
	return reasonReset, 502
}

// mayRetry is the replay rule: may a failed attempt go to another
// target? err is the exchange's error, nil when the target answered a
// status listed in retry.on. A request goes to a second target only if
// (a) no byte of it reached the first, or (b) it is replayable (an
// idempotent method or an Idempotency-Key, and a body sent again from the
// buffer). A retried status needs (b): the target has acted on it.
// Timeouts are retried only when retry.on lists timeout.
func mayRetry(up *upstream, replayable bool, err error, written bool) bool {
	if err == nil {
		return replayable
	}
	if reason, _ := classify(err); reason == reasonTimeout && written && !up.cfg.Retry.Timeout {
		return false
	}
	return !written || replayable
}

// attempt is the attempt loop's state between its steps. The goroutine
// path runs the steps in order in run; the event loop (loop_linux.go)
// runs the same steps as its events come. The decisions (the replay
// rule, the budget, the refusal's wait, what is reported) live in the
// steps and nowhere else.
type attempt struct {
	pick   balance.Pick
	t      *target
	tstart time.Time // this attempt's start: the target's latency counts from it
	n      int       // attempts made, this one included, requeued ones not
	// requeues: refusals that sent the request back to the queue
	// without spending an attempt (retry.requeues); requeue: this
	// failure is one, for retried.
	requeues int
	requeue  bool
	// The failure judge found retryable, for retried to report.
	status int
	err    error
	fail   error
	now    time.Time
}

// run is the attempt loop. The caller relays a result with t set and
// then calls finish; any other result is the gateway's own answer.
func (up *upstream) run(ctx context.Context, g *Gateway, r *request, x exchanger) result {
	up.budget.request(r.start.Unix())
	p, err := up.pick(ctx, g, r, x, up.cfg.Queue.MaxWait.D())
	if err != nil {
		return pickFailure(err)
	}
	var a attempt
	up.begin(r, &a, p)
	for {
		if err := up.resolve(r, &a); err != nil {
			return pickFailure(err)
		}
		status, written, err := x.exchange(ctx, a.t, a.tstart, up.headTimeout(g, &a))
		if err != nil && ctx.Err() != nil {
			err = errClientGone // net/http's path: the request's context ended with its client
		}
		if err == nil && up.readsLoad {
			up.reportLoad(&a, x.loadHeader())
		}
		res, done, wait := up.judge(g, r, &a, status, written, err)
		if done {
			return res
		}
		next, perr := up.pick(ctx, g, r, x, wait)
		if res, done := up.retried(g, r, &a, next, perr, x.drop); done {
			return res
		}
	}
}

// begin starts the first attempt with the first pick.
func (up *upstream) begin(r *request, a *attempt, p balance.Pick) {
	*a = attempt{pick: p, tstart: r.start, n: 1}
	if r.waited {
		// The target's latency starts when the permit is taken: time in
		// the queue is the gateway's, and the balancer learns from it.
		a.tstart = time.Now()
	}
}

// The "auto" try timeout: this many times the target's mean latency, and
// never below the floor. Ten means cuts a try short on about 5 in 100,000
// requests of a service whose times are exponential, and the floor keeps
// a target that answers in microseconds (or fails fast) from having its
// slower requests cut.
const (
	tryAutoFactor = 10
	tryAutoFloor  = 100 * time.Millisecond
)

// errUnanswered is what the balancer learns of a request whose client
// left while the target had not answered it for unansweredFactor of its
// mean latencies (unanswered): a failure by silence, as a try timeout is.
var errUnanswered error = timeoutError("target silent until the client left")

// unanswered reports whether a request whose client left while its target
// had not sent the response head, lat after it was sent, says something
// of the target: it waited over unansweredFactor of the target's mean
// latencies (an exponential service answers later than that about 2
// times in 100, and the client must also have left just then). A
// request's wait in the queue does not count. Reported as the client's
// alone, a black hole (a target that accepts and never answers) taught
// the balancer nothing: each permit its stuck requests freed when their
// clients gave up went to the next request it would swallow. A client
// that leaves sooner says nothing of the target, as before.
func unanswered(e *balance.Endpoint, lat time.Duration) bool {
	avg := e.AvgLatency()
	return avg > 0 && lat > max(unansweredFactor*avg, tryAutoFloor)
}

// unansweredFactor is unanswered's multiple of the mean latency: four,
// not the auto try timeout's ten, since a client's budget is spent in the
// queue too. On bench/contest's blackhole (clients leave at 1 s, the
// queue stands) the requests stuck in the hole had been there under ten
// means (500 ms) when their clients left, and nothing was learned.
const unansweredFactor = 4

// headTimeout is how long attempt a waits for its target's response
// head: timeouts.response_header, or less under retry.try_timeout for
// every attempt but the last, so that a request stuck at a target that
// stopped answering is retried on another before its client gives up,
// and one slower than the try timeout everywhere is still answered.
func (up *upstream) headTimeout(g *Gateway, a *attempt) time.Duration {
	d := g.cfg().Timeouts.ResponseHeader.D()
	r := &up.cfg.Retry
	if a.n >= r.Attempts {
		return d
	}
	try := r.TryAfter
	if r.TryAuto {
		avg := a.pick.Endpoint().AvgLatency()
		if avg <= 0 {
			return d // nothing learned of the target yet
		}
		try = max(tryAutoFactor*avg, tryAutoFloor)
	}
	if try > 0 && try < d {
		return try
	}
	return d
}

// resolve finds the picked target; one removed between the pick and the
// lookup was sent nothing, and another is picked without waiting.
func (up *upstream) resolve(r *request, a *attempt) error {
	for {
		if a.t = up.target(a.pick.Addr()); a.t != nil {
			return nil
		}
		a.pick.Cancel()
		p, err := up.pickNow(r)
		if err != nil {
			return err
		}
		a.pick = p
	}
}

// judge decides after an exchange: relay the response (done, with t
// set), answer for the gateway (done), or try another target (not done),
// picking the next one with a queue wait of wait.
func (up *upstream) judge(g *Gateway, r *request, a *attempt, status int, written bool, err error) (res result, done bool, wait time.Duration) {
	a.status, a.err = status, err
	switch {
	case err != nil:
		a.fail = err
	case up.statuses[status]:
		a.fail = errStatus(status)
	default:
		// Relayed as it is. A 5xx not in retry.on still tells the
		// balancer the target failed: a target answering fast 500s must
		// not look like the fastest healthy one to a latency-aware
		// strategy (the fast-failure trap), and passive health counts it,
		// as Envoy's outlier detection counts consecutive 5xx.
		res := result{t: a.t, pick: a.pick, tstart: a.tstart, status: status}
		if status >= 500 {
			res.outcome = errStatus(status)
		}
		return res, true, 0
	}
	// A failure: relay it (a status) or answer for it (an error), unless
	// the rule, the attempts and the budget allow another try and there
	// is a target left to try. A refusal on an upstream that queues goes
	// back to the queue without spending an attempt, retry.requeues
	// times: the target did not run the request.
	refusal := err == nil && (status == 503 || status == 429)
	queues := up.cfg.Queue.MaxWait.D() > 0
	a.requeue = refusal && queues && up.cfg.Retry.Attempts > 1 && a.requeues < up.cfg.Retry.MaxRequeues
	r.requeue = a.requeue
	if !a.requeue && a.n >= up.cfg.Retry.Attempts || errors.Is(err, errClientGone) || !mayRetry(up, r.replayable, err, written) {
		return up.answer(g, a, ""), true, 0
	}
	// The budget counts a retry in the second it is made (a request that
	// waited on a timeout started seconds ago).
	a.now = time.Now()
	if !up.budget.retry(a.now.Unix()) {
		g.metrics.retryDenied.WithLabelValues(up.name).Inc()
		return up.answer(g, a, reasonBudget), true, 0
	}
	// A refusal (503 or 429: the target had no permit) retried on an
	// upstream that queues waits in the queue for what is left of
	// max_wait, as a first pick would: every other target being at its
	// limit is the moment the queue is for, and answering the refusal
	// would hand the client an error that a permit freed a few
	// milliseconds later would have served. The refusal is reported
	// first, so the learner has cut the target's limit and given its
	// permit back before the wait.
	// A timed-out attempt waits the same way: its target stopped
	// answering, and the others being full is no reason to give up on a
	// request retry.on says may go elsewhere.
	if (refusal || errors.Is(err, errTimeout)) && queues {
		up.report(g, a.pick, a.t, a.now.Sub(a.tstart), a.fail)
		a.pick = balance.Pick{} // reported: relaying the refusal reports nothing more
		wait = up.cfg.Queue.MaxWait.D() - a.now.Sub(r.start)
	}
	return result{}, false, wait
}

// retried goes on after judge chose a retry, with the next pick (or why
// there is none: then the last failure stands and is done). drop
// discards the failed response when it was a status.
func (up *upstream) retried(g *Gateway, r *request, a *attempt, next balance.Pick, perr error, drop func(*target)) (result, bool) {
	if perr != nil {
		up.budget.refund(a.now.Unix()) // no retry made
		return up.answer(g, a, ""), true
	}
	why := "status"
	if a.err != nil {
		why, _ = classify(a.err)
	} else {
		drop(a.t)
	}
	up.report(g, a.pick, a.t, time.Since(a.tstart), a.fail)
	if a.requeue {
		why = "requeue"
		a.requeues++
	} else {
		a.n++
	}
	g.metrics.retries.WithLabelValues(up.name, why).Inc()
	r.retries++
	a.pick, a.tstart = next, a.now
	if r.waited {
		a.tstart = time.Now()
	}
	return result{}, false
}

// answer ends the attempts on a's failure: a status is relayed, an error
// is reported and answered by the gateway with reason (or the error's).
func (up *upstream) answer(g *Gateway, a *attempt, reason string) result {
	if a.err == nil {
		return result{t: a.t, pick: a.pick, tstart: a.tstart, status: a.status, outcome: a.fail}
	}
	fail := a.fail
	lat := time.Since(a.tstart)
	if errors.Is(a.err, errClientGone) {
		fail = balance.ErrClientGone // the client's side broke, not the target's
		if unanswered(a.pick.Endpoint(), lat) {
			fail = errUnanswered
		}
	}
	up.report(g, a.pick, a.t, lat, fail)
	if errors.Is(a.err, errClientGone) {
		return result{code: statusClientGone, reason: reasonClientGone}
	}
	why, code := classify(a.err)
	if reason == "" {
		reason = why
	}
	return result{code: code, reason: reason}
}

// reportLoad hands the pick the target's own load report, its response's
// Fulcrum-Load header (balance/probe's format), before the pick ends. A
// header that does not parse is ignored: the pick learns from what the
// gateway sees.
func (up *upstream) reportLoad(a *attempt, v []byte) {
	if len(v) == 0 {
		return
	}
	if l, err := probe.Parse(string(v)); err == nil {
		a.pick.ReportLoad(l)
	}
}

// responseLoad finds Fulcrum-Load in a response head read in place.
func responseLoad(res *h1.Response) []byte {
	for _, h := range res.Headers {
		if len(h.Name) == len(probe.Header) && h1.EqFold(h.Name, loadHeaderLower) {
			return h.Value
		}
	}
	return nil
}

var loadHeaderLower = strings.ToLower(probe.Header)

func pickFailure(err error) result {
	if errors.Is(err, balance.ErrAtCapacity) {
		return result{code: 503, reason: reasonAtCapacity}
	}
	return result{code: 503, reason: reasonNoTarget}
}

// finish ends a relayed result's pick: outcome is nil, or what broke
// the relay on the target's side.
func (up *upstream) finish(g *Gateway, res *result, end time.Time, relayErr error) {
	outcome := res.outcome
	if relayErr != nil {
		outcome = relayErr
	}
	up.report(g, res.pick, res.t, end.Sub(res.tstart), outcome)
	res.t.m.count(res.status)
}

// pick chooses a target not tried yet. When every target is at its max
// concurrency it waits in the upstream's queue up to maxWait (the first
// pick: queue.max_wait; the retry of a refusal or a timeout: what is left
// of it; any other retry: none, the last failure is answered), for as
// long as the client stays (ctx).
func (up *upstream) pick(ctx context.Context, g *Gateway, r *request, x exchanger, maxWait time.Duration) (balance.Pick, error) {
	p, err := up.pickNow(r)
	if errors.Is(err, balance.ErrAtCapacity) && maxWait > 0 {
		ctx, stop := x.watch(ctx)
		p, err = up.wait(ctx, g, r.info(), maxWait)
		stop()
		up.picked(r, p, err, true)
	}
	return p, err
}

// pickNow picks without waiting.
func (up *upstream) pickNow(r *request) (balance.Pick, error) {
	p, err := up.bal.PickWith(r.info())
	if r.requeue && errors.Is(err, balance.ErrNoneAvailable) {
		// Every target has refused the request once. A refusal is a
		// full target, not a broken one: the requeue waits for any
		// permit, as the first pick did. Without it a fleet of three
		// gateways on three targets answered such requests with the
		// last refusal (bench/contest's fast503 and contest).
		r.tried = nil
		p, err = up.bal.PickWith(r.info())
	}
	up.picked(r, p, err, false)
	return p, err
}

// picked notes a pick's outcome in r: the target is tried, and whether
// the pick waited in the queue.
func (up *upstream) picked(r *request, p balance.Pick, err error, waited bool) {
	r.waited = waited
	if err == nil {
		r.tried = append(r.tried, p.Endpoint())
	}
}

func (r *request) info() balance.PickInfo {
	return balance.PickInfo{Key: r.key, Exclude: r.tried, Arrived: r.start}
}

// wait queues for a permit until max_wait passes or the client leaves;
// a client that left takes no permit (Wait returns none on a done ctx).
func (up *upstream) wait(client context.Context, g *Gateway, info balance.PickInfo, maxWait time.Duration) (balance.Pick, error) {
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(client, maxWait)
	waiting := g.metrics.waiting.WithLabelValues(up.name)
	waiting.Inc()
	p, err := up.bal.Wait(ctx, info)
	waiting.Dec()
	cancel()
	outcome := "served"
	switch {
	case err == nil && client.Err() != nil:
		// A permit came as the client left (Wait takes a free permit
		// before it looks at its context): give it back unused.
		p.Cancel()
		p, err, outcome = balance.Pick{}, balance.ErrAtCapacity, "client_gone"
	case err != nil:
		outcome = "timeout"
		if client.Err() != nil {
			outcome = "client_gone"
		}
		err = balance.ErrAtCapacity
	}
	g.metrics.queued.WithLabelValues(up.name, outcome).Inc()
	g.metrics.queueWait.WithLabelValues(up.name).Observe(time.Since(t0).Seconds())
	return p, err
}

// report ends a pick with its outcome and logs the target's ejection
// and its return, once each, with the cause.
func (up *upstream) report(g *Gateway, p balance.Pick, t *target, lat time.Duration, outcome error) {
	p.Report(lat, outcome)
	if outcome == nil && !t.ejected.Load() {
		return // the common case: one atomic load
	}
	now := up.bal.Ejected(t.addr)
	was := t.ejected.Swap(now)
	switch {
	case now && !was:
		g.metrics.ejections.WithLabelValues(up.name, t.addr).Inc()
		g.log.Warn("target ejected", "upstream", up.name, "target", t.addr, "cause", outcome.Error())
	case was && !now:
		g.log.Info("target back", "upstream", up.name, "target", t.addr, "cause", "ejection ended")
	}
}

// failureBody is the body of a gateway-made answer: the status text and
// the reason, so a client (and a person with curl) can tell why.
func failureBody(code int, reason string) string {
	return statusText[code] + ": " + reason + "\n"
}

var statusText = map[int]string{301: "Moved Permanently", 302: "Found", 303: "See Other", 307: "Temporary Redirect", 308: "Permanent Redirect",
	400: "Bad Request", 404: "Not Found", 413: "Content Too Large", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
	502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}

func isIdempotent(m []byte) bool {
	switch string(m) { // no allocation: the compiler compares in place
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}

func retryAfter(wait time.Duration) []byte {
	s := max(int64((wait+time.Second-1)/time.Second), 1)
	return []byte("Retry-After: " + strconv.FormatInt(s, 10) + "\r\n")
}

// healthLog passes active checks' verdicts to the balancer and logs each
// transition once, with the probes that decided it. A verdict the
// balancer already holds is not logged again: two checkers can overlap
// for a target (a target change starts new ones from the balancer's
// verdicts while the old ones stop), and both would report the same
// transition.
type healthLog struct {
	g  *Gateway
	up *upstream
	th health.Config
}

func (h healthLog) SetHealthy(addr string, ok bool) error {
	h.g.healthMu.Lock()
	defer h.g.healthMu.Unlock()
	for _, e := range h.up.bal.Endpoints() {
		if e.Target.Addr == addr && e.Healthy == ok {
			return nil
		}
	}
	if err := h.up.bal.SetHealthy(addr, ok); err != nil {
		return err // a target no longer there: no transition
	}
	if ok {
		h.g.log.Info("target healthy", "upstream", h.up.name, "target", addr,
			"cause", strconv.Itoa(h.th.HealthyThreshold)+" passed probes in a row of "+h.th.Path)
	} else {
		h.g.log.Warn("target unhealthy", "upstream", h.up.name, "target", addr,
			"cause", strconv.Itoa(h.th.UnhealthyThreshold)+" failed probes in a row of "+h.th.Path)
	}
	return nil
}
