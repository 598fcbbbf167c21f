package supervisor

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/go-sql-driver/mysql"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
	"github.com/fulcrum-lb/fulcrum/supervisor/dedup"
	"github.com/fulcrum-lb/fulcrum/supervisor/leadership"
	roomsim "github.com/fulcrum-lb/fulcrum/supervisor/sim"
)

// statusOf asks a supervisor process for GET /status; ok false when it does
// not answer.
func statusOf(addr string) (Status, bool) {
	req, _ := http.NewRequest("GET", "http://"+addr+"/status", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return Status{}, false
	}
	defer resp.Body.Close()
	var st Status
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return Status{}, false
	}
	return st, true
}

// Two supervisor processes on one PostgreSQL database; kill -9 the leader
// under load, once per sink. The standby takes the lease with the next
// term, the workers follow it, and at the sink no room's message is
// missing and none is there twice: the new leader reads the dedup window
// its predecessor recorded in the database before it accepts a worker, so
// the payloads the workers replay are recognised as published; only those
// A had handed to the sink unconfirmed (stored as uncertain before each
// publish) may come again, and JetStream's own duplicate window drops
// those. The time from the kill to
// the standby leading is logged: docs/supervisor.md reports it.
func TestProcessFailoverLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts supervisor processes")
	}
	for _, sk := range []string{"jetstream", "rabbitmq"} {
		t.Run(sk, func(t *testing.T) { failover(t, sk) })
	}
}

func failover(t *testing.T, sinkType string) {
	dsn := testenv.Postgres(t)
	id := time.Now().UnixNano()
	t.Cleanup(func() { dropDedupRows(t, dsn, fmt.Sprintf("failover-%d", id)) })
	log := newSeqLog()
	sk := procSink(t, sinkType, log)

	addrA, addrB := freeAddr(t), freeAddr(t)
	urlA, urlB := "ws://"+addrA+WorkerPath, "ws://"+addrB+WorkerPath
	f := startProcFleet(t, 10, 4, 10, 20, []string{urlA, urlB})
	cfg := func(addr, url string) Config {
		c := testConfig(nil)
		c.Listen = addr
		c.Redundancy = 2
		c.Warmup = time.Second
		c.Tick = 50 * time.Millisecond
		c.Source.Type, c.Source.URL = "http", f.roomURL+"/rooms"
		c.Sink = sk
		c.HA = HAConfig{Database: dsn, Name: fmt.Sprintf("failover-%d", id), Advertise: url, Lease: time.Second}
		return c
	}
	noLines := func(string) {}
	a := startChild(t, cfg(addrA, urlA), noLines)
	testenv.Eventually(t, "A leading", func() bool { st, ok := statusOf(addrA); return ok && st.Role == "leader" })
	b := startChild(t, cfg(addrB, urlB), noLines)
	testenv.Eventually(t, "B standing by", func() bool { st, ok := statusOf(addrB); return ok && st.Role == "standby" && st.Leader == urlA })
	testenv.Eventually(t, "messages flowing through A", func() bool { return log.count() > 500 })
	before, _ := statusOf(addrA)

	a.kill()
	killed := time.Now()
	<-a.done
	// What A had handed to the sink unconfirmed (stored before each
	// publish): the only payloads B may publish again.
	uncertain := map[uint64]bool{}
	func() {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		rows, err := db.Query(`SELECT k FROM fulcrum_supervisor_dedup WHERE name = $1 AND at < 0`, fmt.Sprintf("failover-%d", id))
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var k int64
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			uncertain[uint64(k)] = true
		}
	}()
	var after Status
	testenv.Eventually(t, "B leading", func() bool {
		var ok bool
		after, ok = statusOf(addrB)
		return ok && after.Role == "leader"
	})
	failover := time.Since(killed)
	if after.Term <= before.Term {
		t.Fatalf("B leads with term %d, not after A's %d", after.Term, before.Term)
	}
	mark := log.count()
	testenv.Eventually(t, "workers on B", f.allConnected)
	testenv.Eventually(t, "messages flowing through B", func() bool { return log.count() > mark+1000 })
	// Every worker follows B's term. On a loaded machine B may lose its own
	// lease (renewals slower than the 1 s lease) and take it again with a
	// later term: then the workers follow that one.
	var last Status
	testenv.Eventually(t, "every worker on B's current term", func() bool {
		st, ok := statusOf(addrB)
		if !ok || st.Role != "leader" {
			return false
		}
		last = st
		for _, w := range f.workers {
			if w.Stats().Term != st.Term {
				return false
			}
		}
		return true
	})
	if last.Term != after.Term {
		t.Logf("B took the lease again meanwhile: term %d, then %d", after.Term, last.Term)
	}
	var replayed uint64
	for _, w := range f.workers {
		replayed += w.Stats().Replayed
	}
	f.stop()
	b.stop()
	procSettle[sinkType](t, log)

	lost, distinct, twice, where := log.gaps()
	t.Logf("failover (%s): B led %v after the kill (lease %v, tick %v); %d distinct messages at the sink, %d lost, %d twice (uncertain at the kill: %d); %d payloads replayed",
		sinkType, failover.Round(time.Millisecond), time.Second, 50*time.Millisecond, distinct, lost, twice, len(uncertain), replayed)
	if replayed == 0 {
		t.Fatal("no worker replayed anything: the failover tested nothing")
	}
	if lost != 0 {
		t.Fatalf("%d messages lost: %v", lost, where)
	}
	if sinkType == "jetstream" && twice != 0 {
		t.Fatalf("%d messages twice in the stream, which drops repeated message ids", twice)
	}
	for _, d := range log.repeated() {
		if !uncertain[dedup.Key(d.room, roomsim.Message{Room: d.room, Seq: d.seq}.ID(), nil)] {
			t.Errorf("%s #%d delivered %d times, though the window in the database had it as published", d.room, d.seq, d.n)
		}
	}
}

// Admin task changes on the leader are stored in the database: the next
// leader applies them, though its source never listed the task; a standby
// refuses them, naming the leader.
func TestHAAdminTasksOutliveTheLeader(t *testing.T) {
	for _, db := range []struct {
		name string
		dsn  func(testing.TB) string
	}{{"postgres", testenv.Postgres}, {"mariadb", mysqlURL}} {
		t.Run(db.name, func(t *testing.T) { adminTasksOutlive(t, db.dsn(t)) })
	}
}

// mysqlURL is testenv's MariaDB as the mysql:// URL ha.database takes.
func mysqlURL(t testing.TB) string {
	c, err := mysql.ParseDSN(testenv.MySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	u := &url.URL{Scheme: "mysql", Host: c.Addr, Path: "/" + c.DBName, User: url.User(c.User)}
	if c.Passwd != "" {
		u.User = url.UserPassword(c.User, c.Passwd)
	}
	return u.String()
}

func adminTasksOutlive(t *testing.T, dsn string) {
	name := fmt.Sprintf("admin-%d", time.Now().UnixNano())
	start := func() *Server {
		c := testConfig(tasks(0, 2))
		c.Redundancy = 1
		c.Tick = 20 * time.Millisecond
		c.HA = HAConfig{Database: dsn, Name: name, Lease: 500 * time.Millisecond}
		ln := freeAddr(t)
		c.Listen, c.HA.Advertise = ln, "ws://"+ln+WorkerPath
		return startServer(t, c)
	}
	a := start()
	awaitLeading(t, a, "a")
	awaitPhase(t, a, Running)
	b := start()
	awaitLeadership(t, b, "b standing by, knowing the leader", func(st leadership.State) bool {
		return st.Role == leadership.Standby && st.Leader == a.cfg.HA.Advertise
	})
	if code := admin(t, b, "POST", "/tasks", `{"add":[{"task_id":"extra"}]}`, nil); code != 503 {
		t.Fatalf("POST /tasks on the standby: %d, want 503", code)
	}
	if code := admin(t, a, "POST", "/tasks", `{"add":[{"task_id":"extra","spec":{"u":1}}],"remove":["room-00000"]}`, nil); code != 200 {
		t.Fatalf("POST /tasks on the leader: %d", code)
	}
	a.Close() // releases the lease
	awaitLeading(t, b, "b")
	awaitPhase(t, b, Running)
	ids := []string{}
	for _, ti := range getTasks(t, b).Tasks {
		ids = append(ids, ti.ID)
	}
	if fmt.Sprint(ids) != "[extra room-00001]" {
		t.Fatalf("b supervises %v, want [extra room-00001]: the stored admin changes", ids)
	}
}

// A leader whose lease is gone stops leading at once, even while its event
// loop is held (a busy loop can be seconds behind): another supervisor
// takes the lease in the database while the loop is held, and a worker
// dialing the old leader is refused with 503.
func TestHALostLeaseRefusesWorkersBeforeTheLoopKnows(t *testing.T) {
	dsn := testenv.Postgres(t)
	name := fmt.Sprintf("stepdown-%d", time.Now().UnixNano())
	c := testConfig(tasks(0, 2))
	c.Tick = 20 * time.Millisecond
	c.HA = HAConfig{Database: dsn, Name: name, Lease: 500 * time.Millisecond}
	ln := freeAddr(t)
	c.Listen, c.HA.Advertise = ln, "ws://"+ln+WorkerPath
	s := startServer(t, c)
	awaitLeading(t, s, "s")
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	release, held := make(chan struct{}), make(chan struct{})
	s.post(func(time.Time) { close(held); <-release })
	<-held
	defer close(release) // before the server's cleanup closes it
	if _, err := db.Exec(`UPDATE fulcrum_supervisor_lease SET holder = 'another', term = term + 1 WHERE name = $1`, name); err != nil {
		t.Fatal(err)
	}
	// The elector notices on its own; the loop is still held.
	awaitLeadership(t, s, "s standing by", func(st leadership.State) bool { return st.Role == leadership.Standby })
	conn, resp, err := websocket.Dial(context.Background(), "ws://"+s.Addr()+WorkerPath+"?token="+testToken, nil)
	if err == nil {
		conn.CloseNow()
		t.Fatal("a worker was accepted by a supervisor whose lease is gone")
	}
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("dial: %v, want 503", err)
	}
}

// awaitLeadership waits on s's elector (its change signal, not a poll)
// until cond holds for its state.
func awaitLeadership(t *testing.T, s *Server, what string, cond func(leadership.State) bool) leadership.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := s.el.Await(ctx, cond)
	if err != nil {
		t.Fatalf("waiting for %s: %v (state %+v)", what, err, st)
	}
	return st
}

// awaitLeading waits until s leads a term with its gate open.
func awaitLeading(t *testing.T, s *Server, who string) leadership.State {
	t.Helper()
	return awaitLeadership(t, s, who+" leading", func(st leadership.State) bool { return st.Role == leadership.Leader })
}

// awaitPhase waits until s's lifecycle is in phase p, asked on its loop.
func awaitPhase(t *testing.T, s *Server, p Phase) {
	t.Helper()
	testenv.Eventually(t, "phase "+p.String(), func() bool {
		got, err := call(context.Background(), s, func(time.Time) Phase { return s.core.Phase() })
		return err == nil && got == p
	})
}

// A leader stopped (SIGSTOP) with admin calls in its socket, resumed after
// the standby took the lease: every call is answered 503 with the new
// leader's address, however the resumed process's goroutines are ordered
// (its event loop, its lease goroutine and the handlers all wake at once),
// and the new leader's view shows none of them applied.
func TestHAFrozenLeaderRefusesQueuedAdminCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("starts supervisor processes")
	}
	dsn := testenv.Postgres(t)
	id := time.Now().UnixNano()
	t.Cleanup(func() { dropDedupRows(t, dsn, fmt.Sprintf("frozen-admin-%d", id)) })
	addrA, addrB := freeAddr(t), freeAddr(t)
	urlA, urlB := "ws://"+addrA+WorkerPath, "ws://"+addrB+WorkerPath
	f := startProcFleet(t, 4, 2, 10, 5, []string{urlA, urlB})
	cfg := func(addr, url string) Config {
		c := testConfig(nil)
		c.Listen = addr
		c.Redundancy = 1
		c.Warmup = 200 * time.Millisecond
		c.Tick = 50 * time.Millisecond
		c.Source.Type, c.Source.URL = "http", f.roomURL+"/rooms"
		c.HA = HAConfig{Database: dsn, Name: fmt.Sprintf("frozen-admin-%d", id), Advertise: url, Lease: time.Second}
		return c
	}
	a := startChild(t, cfg(addrA, urlA), func(string) {})
	testenv.Eventually(t, "A leading and running", func() bool {
		st, ok := statusOf(addrA)
		return ok && st.Role == "leader" && st.Phase == "running" && len(st.Workers) == 2
	})
	startChild(t, cfg(addrB, urlB), func(string) {})
	testenv.Eventually(t, "B standing by", func() bool { st, ok := statusOf(addrB); return ok && st.Role == "standby" })

	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The signal is delivered asynchronously: the calls go out once the
	// kernel shows the process stopped, or one could be answered first.
	testenv.Eventually(t, "A stopped", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", a.cmd.Process.Pid))
		if err != nil {
			return false
		}
		_, rest, _ := strings.Cut(string(b), ") ") // after the command name, which may hold spaces
		return strings.HasPrefix(rest, "T")
	})
	calls := []struct{ method, path, body string }{
		{"POST", "/rebalance", ""},
		{"POST", "/workers/w0/drain", ""},
		{"POST", "/tasks", `{"add":[{"task_id":"extra"}]}`},
		{"POST", "/rebalance?threshold=0", ""},
		{"POST", "/workers/w1/drain", ""},
	}
	type answer struct {
		code   int
		leader string
		err    error
	}
	answers := make(chan answer, len(calls))
	var wrote sync.WaitGroup
	for _, c := range calls {
		wrote.Add(1)
		var once sync.Once
		trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { once.Do(wrote.Done) }}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), c.method, "http://"+addrA+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		go func() {
			resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
			if err != nil {
				once.Do(wrote.Done)
				answers <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			var body struct{ Leader string }
			_ = json.NewDecoder(resp.Body).Decode(&body)
			answers <- answer{code: resp.StatusCode, leader: body.Leader}
		}()
	}
	wrote.Wait() // every call sits in the stopped leader's socket
	testenv.Eventually(t, "B leading", func() bool { st, ok := statusOf(addrB); return ok && st.Role == "leader" })
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for i := range calls {
		a := <-answers
		if a.err != nil || a.code != http.StatusServiceUnavailable || a.leader != urlB {
			t.Errorf("call %d of %d: code %d, leader %q, err %v; want 503 naming %s", i+1, len(calls), a.code, a.leader, a.err, urlB)
		}
	}
	testenv.Eventually(t, "B running", func() bool { st, ok := statusOf(addrB); return ok && st.Phase == "running" })
	st, _ := statusOf(addrB)
	for _, w := range st.Workers {
		if w.Draining {
			t.Errorf("worker %s draining on B: a call refused by A was applied", w.ID)
		}
	}
	if st.Tasks != 4 {
		t.Errorf("B supervises %d tasks, want the source's 4 (the refused POST /tasks stored nothing)", st.Tasks)
	}
}

// dropDedupRows removes a test fleet's dedup window from the shared
// database (a leader prunes only its own fleet's, while it runs).
func dropDedupRows(t testing.TB, dsn, name string) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Error(err)
		return
	}
	defer db.Close()
	if _, err := db.Exec(`DELETE FROM fulcrum_supervisor_dedup WHERE name = $1`, name); err != nil {
		t.Error(err)
	}
}
