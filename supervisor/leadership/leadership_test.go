package leadership_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
	"github.com/fulcrum-lb/fulcrum/supervisor/leadership"
	"github.com/fulcrum-lb/fulcrum/supervisor/lease"
)

// elector runs an elector for holder on the lease name; stop ends its Run
// (releasing the lease) and waits for it.
func elector(t *testing.T, dsn, name, holder string, cfg leadership.Config) (e *leadership.Elector, stop func()) {
	t.Helper()
	l, err := lease.Open(context.Background(), dsn, name, holder, "ws://"+holder+"/ws", cfg.TTL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Advertise = "ws://" + holder + "/ws"
	e = leadership.New(l, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(func() { stop(); l.Close() })
	return e, stop
}

func await(t *testing.T, e *leadership.Elector, what string, cond func(leadership.State) bool) leadership.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := e.Await(ctx, cond)
	if err != nil {
		t.Fatalf("%s: %v (state %+v)", what, err, st)
	}
	return st
}

func leading(st leadership.State) bool { return st.Role == leadership.Leader }

// Alone, the gate is always open and there is no term.
func TestAloneAlwaysLeads(t *testing.T) {
	e := leadership.New(nil, leadership.Config{})
	if st := e.State(); st.Role != leadership.Alone || st.Term != 0 || !e.Leads(e.Term()) {
		t.Fatalf("alone: %+v, Leads %v", st, e.Leads(e.Term()))
	}
	e.Run(context.Background()) // returns at once: nothing to elect
}

// One elector leads, the other stands by naming it; the leader's Elected
// runs before its gate opens and Resigned after it closes; when the leader
// stops (releasing the lease) the other leads with a later term, and the
// old term's gate stays shut.
func TestElectorTakeoverAndGate(t *testing.T) {
	dsn := testenv.Postgres(t)
	name := fmt.Sprintf("elector-%d", time.Now().UnixNano())
	opened := make(chan bool, 4)
	var a *leadership.Elector
	cfg := leadership.Config{TTL: 500 * time.Millisecond, Tick: 20 * time.Millisecond}
	cfgA := cfg
	cfgA.Elected = func(_ context.Context, term uint64) { opened <- a.Leads(term) }
	a, stopA := elector(t, dsn, name, "a", cfgA)
	sa := await(t, a, "a leading", leading)
	if <-opened {
		t.Fatal("a's gate was open while Elected prepared the term")
	}
	if !a.Leads(sa.Term) || a.Leads(sa.Term+1) || sa.Leader != "ws://a/ws" {
		t.Fatalf("a: %+v, Leads(term) %v", sa, a.Leads(sa.Term))
	}

	resigned := make(chan uint64, 1)
	cfgB := cfg
	cfgB.Resigned = func(term uint64) { resigned <- term }
	b, _ := elector(t, dsn, name, "b", cfgB)
	sb := await(t, b, "b standing by, naming a", func(st leadership.State) bool { return st.Leader == "ws://a/ws" })
	if sb.Role != leadership.Standby || b.Leads(sa.Term) {
		t.Fatalf("b: %+v", sb)
	}

	stopA()
	sb = await(t, b, "b leading", leading)
	if sb.Term <= sa.Term || !b.Leads(sb.Term) {
		t.Fatalf("b leads term %d after a's %d", sb.Term, sa.Term)
	}
	if a.Leads(sa.Term) || a.State().Role != leadership.Standby {
		t.Fatalf("a after stopping: %+v, still leads its term", a.State())
	}

	// Another holder takes the lease in the database: b's gate closes on
	// its own (no caller tells it), then Resigned gets the term.
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE fulcrum_supervisor_lease SET holder = 'another', url = 'ws://another/ws', term = term + 1 WHERE name = $1`, name); err != nil {
		t.Fatal(err)
	}
	await(t, b, "b standing by", func(st leadership.State) bool { return st.Role == leadership.Standby })
	if b.Leads(sb.Term) {
		t.Fatal("b's gate open after it stood down")
	}
	if got := <-resigned; got != sb.Term {
		t.Fatalf("Resigned(%d), want b's term %d", got, sb.Term)
	}
	if got := b.LeaderElsewhere(context.Background()); got != "ws://another/ws" {
		t.Fatalf("LeaderElsewhere = %q, want the new holder's URL", got)
	}
}
