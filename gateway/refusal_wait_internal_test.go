package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// releasingClient is a scripted exchange that frees a held permit the
// moment a pick starts waiting in the queue.
type releasingClient struct {
	scriptedExchange
	held    balance.Pick
	waits   int
	release time.Time
}

func (x *releasingClient) loadHeader() []byte { return nil }

func (x *releasingClient) watch(ctx context.Context) (context.Context, func()) {
	x.waits++
	x.release = time.Now()
	x.held.Done(nil)
	return ctx, func() {}
}

const refusalUpstream = "upstreams:\n  api:\n    strategy: capacity\n" +
	"    targets: [{url: \"http://127.0.0.1:1\", max_concurrency: 1}, {url: \"http://127.0.0.1:2\", max_concurrency: 1}]\n" +
	"    retry: {attempts: 2, on: [503]}\n"

// A target's refusal (503) retried while the other target is at its
// limit waits in the queue for that target's permit, as a first pick
// would, instead of relaying the refusal to the client; the refused
// pick is reported before the wait (its permit back, nothing left in
// flight).
func TestRefusalRetryWaitsInQueue(t *testing.T) {
	g := newTestGateway(t, refusalUpstream+"    queue: {max_wait: 1m}\n")
	up := g.rt.Load().ups["api"]
	held, err := up.bal.PickWith(balance.PickInfo{})
	if err != nil {
		t.Fatal(err)
	}
	x := &releasingClient{held: held, scriptedExchange: scriptedExchange{replies: []scripted{{status: 503, written: true}, {status: 200, written: true}}}}
	rq := request{up: up, start: time.Now(), replayable: true}
	res := up.run(context.Background(), g, &rq, x)
	if res.t == nil || res.status != 200 || rq.retries != 1 || x.waits != 1 {
		t.Fatalf("result %d (code %d %s) after %d retries and %d waits, want the second target's 200 after 1 retry that waited", res.status, res.code, res.reason, rq.retries, x.waits)
	}
	if res.t.addr != held.Addr() {
		t.Fatalf("the retry went to %s, want %s (the refusing target is not tried again)", res.t.addr, held.Addr())
	}
	if res.tstart.Before(x.release) {
		t.Fatal("the retry's latency counts from before its wait: the queue's time would be the target's")
	}
	up.finish(g, &res, time.Now(), nil)
	for _, e := range up.bal.Endpoints() {
		if e.InFlight != 0 {
			t.Fatalf("%s has %d in flight after the request, want 0", e.Target.Addr, e.InFlight)
		}
	}
}

// Without a queue the refusal is relayed at once, as before.
func TestRefusalRelayedWithoutQueue(t *testing.T) {
	g := newTestGateway(t, refusalUpstream)
	up := g.rt.Load().ups["api"]
	held, err := up.bal.PickWith(balance.PickInfo{})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Done(nil)
	x := &releasingClient{held: held, scriptedExchange: scriptedExchange{replies: []scripted{{status: 503, written: true}}}}
	rq := request{up: up, start: time.Now(), replayable: true}
	res := up.run(context.Background(), g, &rq, x)
	if res.t == nil || res.status != 503 || x.waits != 0 {
		t.Fatalf("result %d (code %d %s) after %d waits, want the target's 503 relayed without a wait", res.status, res.code, res.reason, x.waits)
	}
	up.finish(g, &res, time.Now(), nil)
}

// A first pick that waited in the queue counts the target's latency from
// the moment it got the permit, not from the request's start.
func TestQueuedPickLatencyStartsAtPermit(t *testing.T) {
	g := newTestGateway(t, "upstreams:\n  api:\n    strategy: capacity\n    targets: [{url: \"http://127.0.0.1:1\", max_concurrency: 1}]\n    queue: {max_wait: 1m}\n")
	up := g.rt.Load().ups["api"]
	held, err := up.bal.PickWith(balance.PickInfo{})
	if err != nil {
		t.Fatal(err)
	}
	x := &releasingClient{held: held, scriptedExchange: scriptedExchange{replies: []scripted{{status: 200, written: true}}}}
	rq := request{up: up, start: time.Now().Add(-time.Hour)}
	res := up.run(context.Background(), g, &rq, x)
	if res.t == nil || res.status != 200 || x.waits != 1 {
		t.Fatalf("result %d (code %d %s) after %d waits, want 200 after one wait", res.status, res.code, res.reason, x.waits)
	}
	if res.tstart.Before(x.release) {
		t.Fatalf("latency counted from %v, before the permit came at %v", res.tstart, x.release)
	}
	up.finish(g, &res, time.Now(), nil)
}

// runScript runs one replayable request through a fresh gateway with
// upstream api configured by cfg, each attempt answered the next status
// of statuses, and ends the relayed result's pick.
func runScript(t *testing.T, cfg string, statuses ...int) (result, *request, *scriptedExchange) {
	t.Helper()
	g := newTestGateway(t, cfg)
	up := g.rt.Load().ups["api"]
	x := &scriptedExchange{}
	for _, st := range statuses {
		x.replies = append(x.replies, scripted{status: st, written: true})
	}
	rq := &request{up: up, start: time.Now(), replayable: true}
	res := up.run(context.Background(), g, rq, x)
	if res.t != nil {
		up.finish(g, &res, time.Now(), nil)
	}
	return res, rq, x
}

// requeueUpstream has three targets and queues.
const requeueUpstream = "upstreams:\n  api:\n    strategy: capacity\n" +
	"    targets: [{url: \"http://127.0.0.1:1\"}, {url: \"http://127.0.0.1:2\"}, {url: \"http://127.0.0.1:3\"}]\n" +
	"    queue: {max_wait: 1m}\n"

// A refusal on an upstream that queues goes back to the queue without
// spending an attempt (retry.requeues): two targets refusing in turn,
// as two gateways' load on shared targets makes them, still leave the
// request its one retry, and the third target serves it. The target
// refused nothing it ran, so no attempt of the client's was used.
func TestRefusalRequeuedWithoutSpendingAnAttempt(t *testing.T) {
	res, rq, _ := runScript(t, requeueUpstream+"    retry: {attempts: 2, on: [503]}\n", 503, 503, 200)
	if res.t == nil || res.status != 200 || rq.retries != 2 || len(rq.tried) != 3 {
		t.Fatalf("result %d (code %d %s) after %d retries over %d targets, want the third target's 200 after 2 requeues", res.status, res.code, res.reason, rq.retries, len(rq.tried))
	}

	// A 502 is not a refusal: it spends the one retry, and the second
	// failure is relayed.
	res, _, x := runScript(t, requeueUpstream+"    retry: {attempts: 2, on: [502, 503]}\n", 503, 502, 502, 200)
	if res.t == nil || res.status != 502 || x.n != 3 {
		t.Fatalf("result %d (code %d %s) after %d exchanges, want the second 502 relayed after 3 (a requeue, then the one retry)", res.status, res.code, res.reason, x.n)
	}
}

// requeues: 0 makes a refusal spend an attempt like any failure, and
// attempts: 1 turns requeues off with the retries.
func TestRequeuesOff(t *testing.T) {
	for retry, want := range map[string]int{"{attempts: 2, requeues: 0, on: [503]}": 2, "{attempts: 1, on: [503]}": 1} {
		res, _, x := runScript(t, requeueUpstream+"    retry: "+retry+"\n", 503, 503, 200)
		if res.t == nil || res.status != 503 || x.n != want {
			t.Fatalf("retry %s: result %d (code %d %s) after %d exchanges, want a 503 relayed after %d", retry, res.status, res.code, res.reason, x.n, want)
		}
	}
}

// The requeues are bounded: a request every target keeps refusing ends
// with the refusal relayed after retry.requeues requeues and its
// retries, not in a loop (the refused targets come free at once here,
// so each requeue finds one).
func TestRequeuesBounded(t *testing.T) {
	res, _, x := runScript(t, "upstreams:\n  api:\n    strategy: round_robin\n"+
		"    targets: [{url: \"http://127.0.0.1:1\"}, {url: \"http://127.0.0.1:2\"}, {url: \"http://127.0.0.1:3\"}, {url: \"http://127.0.0.1:4\"}, {url: \"http://127.0.0.1:5\"}, {url: \"http://127.0.0.1:6\"}, {url: \"http://127.0.0.1:7\"}]\n"+
		"    queue: {max_wait: 1m}\n    retry: {attempts: 2, requeues: 3, on: [503], min_per_second: 1000}\n",
		503, 503, 503, 503, 503, 503, 503)
	if res.t == nil || res.status != 503 || x.n != 5 {
		t.Fatalf("result %d (code %d %s) after %d exchanges, want the 503 relayed after 5 (first, 3 requeues, 1 retry)", res.status, res.code, res.reason, x.n)
	}
}

// twoTargets has two targets and queues.
const twoTargets = "upstreams:\n  api:\n    strategy: capacity\n" +
	"    targets: [{url: \"http://127.0.0.1:1\"}, {url: \"http://127.0.0.1:2\"}]\n    queue: {max_wait: 1m}\n"

// Once every target has refused the request, a requeue may go back to
// one of them: a refusal is a full target, and waiting for its permit is
// what the first pick would have done. Two targets, both refusing once,
// then the first serves.
func TestRequeueAfterEveryTargetRefused(t *testing.T) {
	res, _, x := runScript(t, twoTargets+"    retry: {attempts: 2, on: [503]}\n", 503, 503, 200)
	if res.t == nil || res.status != 200 || x.n != 3 {
		t.Fatalf("result %d (code %d %s) after %d exchanges, want a 200 on the third, back at a target that refused", res.status, res.code, res.reason, x.n)
	}

	// A failure that is not a refusal keeps its exclusions: with both
	// targets tried, the last failure is answered.
	res, _, x = runScript(t, twoTargets+"    retry: {attempts: 3, requeues: 0, on: [502, 503]}\n", 502, 503, 200)
	if res.t == nil || res.status != 503 || x.n != 2 {
		t.Fatalf("result %d (code %d %s) after %d exchanges, want the 503 relayed after 2 (no target left untried)", res.status, res.code, res.reason, x.n)
	}
}
