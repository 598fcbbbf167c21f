// Package leadership decides which supervisor of a fleet leads. One Elector
// per process takes or waits for the lease (River's leadership package is
// the model) and answers, for the rest of the process, the one question
// leadership raises: am I leading, under which term, and may I still act
// on it now. Everything that depends on leadership reads this gate; nothing
// else keeps a copy of the role or the term.
package leadership

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Lease is the shared record one supervisor at a time holds
// (supervisor/lease on PostgreSQL or MySQL).
type Lease interface {
	// Acquire takes the lease if it is free or expired, with a new term;
	// otherwise it reports who holds it.
	Acquire(ctx context.Context) (term uint64, leading bool, leaderURL string, err error)
	// Renew extends term's lease; false when the term is over.
	Renew(ctx context.Context, term uint64) (bool, error)
	// Release ends term at once.
	Release(ctx context.Context, term uint64) error
	// Leader reads who leads now ("" when no lease is live).
	Leader(ctx context.Context) (url string, term uint64, err error)
}

// Role is what a supervisor is in its fleet.
type Role int32

// Roles.
const (
	Alone   Role = iota // no high availability: it always leads
	Standby             // another supervisor leads, or none yet
	Leader              // it holds the lease
)

func (r Role) String() string {
	switch r {
	case Standby:
		return "standby"
	case Leader:
		return "leader"
	}
	return "alone"
}

// State is the elector's answer at one instant.
type State struct {
	Role Role
	// Term is the term this process leads; 0 when it does not (and
	// always 0 alone).
	Term uint64
	// Leader is the leader's worker URL as last read from the lease ("" alone
	// or not yet known); this process's own URL while it leads.
	Leader string
}

// Config tunes an Elector.
type Config struct {
	// TTL is the lease's length; Tick how often a standby tries to take it
	// (and the margin the leader keeps: it trusts itself until two ticks
	// before the lease would end).
	TTL, Tick time.Duration
	// Advertise is this process's worker URL (what the lease records).
	Advertise string
	Log       *slog.Logger
	// Elected prepares term once the lease is taken, before the gate opens
	// (the dedup window read, a fresh lifecycle on the event loop): until it
	// returns, workers and admin calls are refused.
	Elected func(ctx context.Context, term uint64)
	// Resigned tears term down after the gate has closed (workers refused
	// and their messages dropped from that instant, however far behind the
	// event loop is).
	Resigned func(term uint64)
}

// Elector holds or waits for the lease and is the process's one gate on
// leadership. Its methods are safe from any goroutine.
type Elector struct {
	lease Lease // nil: alone
	cfg   Config
	state atomic.Pointer[State]
	// trusted is how long after epoch (monotonic) the current term may act:
	// the trust counts from the start of the last successful renewal.
	// Checked when a caller acts, not only when it arrives, so a call
	// queued behind a frozen loop (SIGSTOP) that comes due after the lease
	// ran out is refused even before Run notices.
	epoch   time.Time
	trusted atomic.Int64

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change of state
}

// New returns an elector on l; with a nil l the process runs alone and
// always leads (Run need not be called).
func New(l Lease, cfg Config) *Elector {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Elected == nil {
		cfg.Elected = func(context.Context, uint64) {}
	}
	if cfg.Resigned == nil {
		cfg.Resigned = func(uint64) {}
	}
	e := &Elector{lease: l, cfg: cfg, epoch: time.Now(), changed: make(chan struct{})}
	st := &State{Role: Alone}
	if l != nil {
		st.Role = Standby
	}
	e.state.Store(st)
	return e
}

// State is the current answer.
func (e *Elector) State() State { return *e.state.Load() }

// Term is the term a caller accepts work under (a worker's connection, an
// admin call): it checks Leads(term) when it arrives and again when it acts.
func (e *Elector) Term() uint64 { return e.state.Load().Term }

// Leads reports whether this process may act as the leader of term now:
// alone, or leading term with the lease trusted at this instant.
func (e *Elector) Leads(term uint64) bool {
	if e.lease == nil {
		return true
	}
	st := e.state.Load()
	return term != 0 && st.Role == Leader && st.Term == term &&
		int64(time.Since(e.epoch)) < e.trusted.Load()
}

// Changed is closed at the next change of State. Read it before State, and
// no change can slip between them: tests and watchers wait on it instead
// of polling.
func (e *Elector) Changed() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changed
}

// Await returns the first state cond holds for (the current one if it
// does), or ctx's error.
func (e *Elector) Await(ctx context.Context, cond func(State) bool) (State, error) {
	for {
		ch := e.Changed()
		if st := e.State(); cond(st) {
			return st, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return e.State(), ctx.Err()
		}
	}
}

func (e *Elector) set(st State) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if *e.state.Load() == st {
		return
	}
	e.state.Store(&st)
	close(e.changed)
	e.changed = make(chan struct{})
}

// LeaderElsewhere is the leader's worker URL when it is another process,
// for a refusal to point at: the last one read, or, when that is this
// process (a leader that just lost its lease knows only itself), the
// database's answer; "" when unknown.
func (e *Elector) LeaderElsewhere(ctx context.Context) string {
	if l := e.State().Leader; l != "" && l != e.cfg.Advertise {
		return l
	}
	if e.lease == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if u, _, err := e.lease.Leader(ctx); err == nil && u != e.cfg.Advertise {
		return u
	}
	return ""
}

// Run keeps the lease until ctx is done: a standby tries to take it every
// tick; the leader renews it every third of the lease and trusts itself
// until two ticks before the lease would end, counted from the start of
// its last successful renewal, so it steps down (at most a tick late)
// before a standby can take over. On return it releases a lease it holds,
// so a standby need not wait for it to expire.
func (e *Elector) Run(ctx context.Context) {
	if e.lease == nil {
		return
	}
	ttl := e.cfg.TTL
	trust := ttl - 2*e.cfg.Tick
	renewEvery := ttl / 3
	tick := time.NewTicker(e.cfg.Tick)
	defer tick.Stop()
	var term uint64
	var renewed, lastErrLog time.Time
	logErr := func(msg string, err error) {
		if time.Since(lastErrLog) >= 5*time.Second { // one line per 5 s while the database is away
			lastErrLog = time.Now()
			e.cfg.Log.Warn(msg, "err", err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			if term != 0 {
				rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				if err := e.lease.Release(rctx, term); err != nil {
					e.cfg.Log.Warn("could not release the lease; a standby takes over when it expires", "err", err)
				}
				cancel()
				e.resign(term)
			}
			return
		case <-tick.C:
		}
		start := time.Now()
		lctx, cancel := context.WithTimeout(ctx, max(ttl/3, e.cfg.Tick))
		switch {
		case term == 0:
			t, ok, url, err := e.lease.Acquire(lctx)
			switch {
			case err != nil:
				logErr("lease: cannot reach the database", err)
			case ok:
				term, renewed = t, start
				e.trusted.Store(int64(start.Sub(e.epoch) + trust))
				e.set(State{Role: Standby, Leader: url}) // not yet open: Elected prepares the term first
				e.cfg.Elected(ctx, t)
				e.set(State{Role: Leader, Term: t, Leader: url})
			default:
				e.set(State{Role: Standby, Leader: url})
			}
		case start.Sub(renewed) >= renewEvery:
			ok, err := e.lease.Renew(lctx, term)
			switch {
			case err != nil:
				logErr("lease: renewal failed; retrying every tick", err)
			case ok:
				renewed = start
				e.trusted.Store(int64(start.Sub(e.epoch) + trust))
			default:
				e.cfg.Log.Warn("lease lost: it ran out before this renewal, or another supervisor took it", "term", term)
				renewed = time.Time{} // step down now
			}
		}
		cancel()
		if term != 0 && time.Since(renewed) >= trust {
			e.resign(term)
			term = 0
		}
	}
}

// resign closes term's gate now, not when the event loop gets to it (a busy
// loop can be seconds behind): from here workers are refused, their
// messages of term dropped, admin changes refused, and no instruction set
// is sent. Then Resigned tears the term down.
func (e *Elector) resign(term uint64) {
	e.trusted.Store(0)
	e.set(State{Role: Standby, Leader: e.State().Leader})
	e.cfg.Resigned(term)
}
