package gateway

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// scriptedExchange answers each attempt from a script: a status, or an
// error with whether the request was written.
type scriptedExchange struct {
	replies []scripted
	n       int
}

type scripted struct {
	status  int
	written bool
	err     error
}

func (x *scriptedExchange) exchange(context.Context, *target, time.Time, time.Duration) (int, bool, error) {
	x.n++
	if x.n > len(x.replies) {
		return 0, true, errors.New("an exchange the script does not have")
	}
	r := x.replies[x.n-1]
	return r.status, r.written, r.err
}

func (x *scriptedExchange) drop(*target) {}

func (x *scriptedExchange) loadHeader() []byte { return nil }

func (x *scriptedExchange) watch(ctx context.Context) (context.Context, func()) {
	return ctx, func() {}
}

func (b *budget) retriesCounted() (n int64) {
	for i := range b.slots {
		n += b.slots[i].rets.Load()
	}
	return n
}

// A retry the budget allows but no target is left for is not counted
// as one: with a single target, a refused connection is answered
// without a retry and the budget keeps its token (before, every such
// request spent one, and the budget ran dry without any retry made).
func TestBudgetCountsOnlyRetriesMade(t *testing.T) {
	g := newTestGateway(t, "upstreams:\n  api:\n    targets: [{url: \"http://127.0.0.1:1\"}]\n"+
		"    retry: {attempts: 3, budget: 0.5, min_per_second: 1}\n")
	up := g.rt.Load().ups["api"]
	refused := scripted{err: &connectError{addr: "127.0.0.1:1", err: errors.New("refused")}}
	rq := request{up: up, start: time.Now(), replayable: true}
	res := up.run(context.Background(), g, &rq, &scriptedExchange{replies: []scripted{refused}})
	if res.code != 502 || res.reason != reasonConnect || rq.retries != 0 {
		t.Fatalf("answer %d %s after %d retries, want 502 connect_error after none", res.code, res.reason, rq.retries)
	}
	if n := up.budget.retriesCounted(); n != 0 {
		t.Fatalf("the budget counts %d retries, want 0 (none was made)", n)
	}
}

// A retry counted for a second its slot has left behind (a request that
// started ten or more seconds ago, then waited on a timeout) adds to the
// newer second instead of wiping its counts: with a floor of 10 retries
// per window, 5 at second 105, 1 late one for second 95 and then only 4
// more fit (before, the late one emptied second 105's slot and 10 more
// fit).
func TestBudgetLateRetryKeepsNewerCounts(t *testing.T) {
	var b budget
	b.init(0, 1)
	for i := range 5 {
		if !b.retry(105) {
			t.Fatalf("retry %d refused", i)
		}
	}
	if !b.retry(95) {
		t.Fatal("the late retry refused")
	}
	more := 0
	for b.retry(105) {
		more++
	}
	if more != 4 {
		t.Fatalf("%d more retries fit at second 105, want 4", more)
	}
}

// Each health transition is logged once, even when two checkers report
// it (a target change starts new checkers while the old ones stop), and
// a verdict on a target that is gone logs nothing.
func TestHealthTransitionLoggedOnce(t *testing.T) {
	g := newTestGateway(t, "upstreams:\n  api:\n    targets: [{url: \"http://127.0.0.1:1\"}]\n")
	var buf bytes.Buffer
	g.log = slog.New(slog.NewTextHandler(&buf, nil))
	h := healthLog{g: g, up: g.rt.Load().ups["api"]}
	for _, ok := range []bool{false, false, true, true} {
		_ = h.SetHealthy("127.0.0.1:1", ok)
	}
	_ = h.SetHealthy("127.0.0.1:2", false)
	got := buf.String()
	if n, m := strings.Count(got, "target unhealthy"), strings.Count(got, "target healthy"); n != 1 || m != 1 {
		t.Fatalf("%d unhealthy and %d healthy lines, want 1 each:\n%s", n, m, got)
	}
}

// leavingClient is a scripted exchange whose client leaves the moment
// the pick starts waiting, just as a permit comes free.
type leavingClient struct {
	scriptedExchange
	held balance.Pick
}

func (x *leavingClient) loadHeader() []byte { return nil }

func (x *leavingClient) watch(context.Context) (context.Context, func()) {
	x.held.Done(nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx, func() {}
}

// A queued client that leaves as a permit comes free takes no permit and
// sends nothing: balance.Wait hands out a free permit before it looks at
// its context, and the gateway used to take that for a served wait.
func TestQueuedClientLeavingAsPermitFreesTakesNone(t *testing.T) {
	g := newTestGateway(t, "upstreams:\n  api:\n    targets: [{url: \"http://127.0.0.1:1\", max_concurrency: 1}]\n"+
		"    queue: {max_wait: 1m}\n")
	up := g.rt.Load().ups["api"]
	held, err := up.bal.PickWith(balance.PickInfo{})
	if err != nil {
		t.Fatal(err)
	}
	x := &leavingClient{held: held}
	rq := request{up: up, start: time.Now()}
	res := up.run(context.Background(), g, &rq, x)
	if res.code != 503 || res.reason != reasonAtCapacity || x.n != 0 {
		t.Fatalf("answer %d %s after %d exchanges, want 503 at_capacity and none", res.code, res.reason, x.n)
	}
	if in := up.bal.Endpoints()[0].InFlight; in != 0 {
		t.Fatalf("in_flight %d, want 0: the permit went back", in)
	}
}
