package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
	"github.com/fulcrum-lb/fulcrum/supervisor/dedup"
	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
)

func open(t *testing.T, dsn, name, holder string, ttl time.Duration) *Lease {
	t.Helper()
	l, err := Open(context.Background(), dsn, name, holder, "ws://"+holder+"/ws", ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// mysqlURL is testenv's MariaDB as the mysql:// URL the config takes.
func mysqlURL(t testing.TB) string {
	c, err := mysql.ParseDSN(testenv.MySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	u := &url.URL{Scheme: "mysql", Host: c.Addr, Path: "/" + c.DBName, User: url.UserPassword(c.User, c.Passwd)}
	if c.Passwd == "" {
		u.User = url.User(c.User)
	}
	return u.String()
}

// One leads; the other sees where; when the leader stops renewing, the
// other takes over with the next term, and the old term can neither renew
// nor write tasks. On PostgreSQL and on MariaDB.
func TestLeaseTakeoverAndFencing(t *testing.T) {
	for _, db := range []struct {
		name string
		dsn  func(testing.TB) string
	}{{"postgres", testenv.Postgres}, {"mariadb", mysqlURL}} {
		t.Run(db.name, func(t *testing.T) { takeover(t, db.dsn(t)) })
	}
}

func takeover(t *testing.T, dsn string) {
	ctx := context.Background()
	name := fmt.Sprintf("test-%d", time.Now().UnixNano())
	a := open(t, dsn, name, "a", 300*time.Millisecond)
	b := open(t, dsn, name, "b", 300*time.Millisecond)

	ta, ok, _, err := a.Acquire(ctx)
	if err != nil || !ok {
		t.Fatalf("a: Acquire = %d %v %v, want to lead", ta, ok, err)
	}
	if tb, ok, url, err := b.Acquire(ctx); err != nil || ok || url != "ws://a/ws" || tb != ta {
		t.Fatalf("b: Acquire = %d %v %q %v, want a's term and URL", tb, ok, url, err)
	}
	if ok, err := a.Renew(ctx, ta); !ok || err != nil {
		t.Fatalf("a: Renew = %v %v", ok, err)
	}
	if err := a.SaveTasks(ctx, ta, []protocol.Task{{TaskID: "x", Spec: json.RawMessage(`{"u":1}`)}}, []string{"y"}); err != nil {
		t.Fatal(err)
	}
	if add, remove, err := b.LoadTasks(ctx); err != nil || len(add) != 1 || string(add[0].Spec) != `{"u":1}` || !slices.Equal(remove, []string{"y"}) {
		t.Fatalf("LoadTasks = %v %v %v, want x with its spec, y removed", add, remove, err)
	}

	var tb uint64
	testenv.Eventually(t, "b to take the expired lease", func() bool {
		var ok bool
		tb, ok, _, err = b.Acquire(ctx)
		return err == nil && ok
	})
	if tb != ta+1 {
		t.Fatalf("b's term %d, want %d", tb, ta+1)
	}
	if ok, err := a.Renew(ctx, ta); ok || err != nil {
		t.Fatalf("a renewed a lost term: %v %v", ok, err)
	}
	if err := a.SaveTasks(ctx, ta, []protocol.Task{{TaskID: "z"}}, nil); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a wrote with an old term: %v", err)
	}
	if err := b.SaveTasks(ctx, tb, nil, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	add, remove, err := b.LoadTasks(ctx)
	if err != nil || len(add) != 0 || !slices.Equal(remove, []string{"x", "y"}) {
		t.Fatalf("LoadTasks = %v %v %v, want x and y removed", add, remove, err)
	}
	if err := b.ForgetTasks(ctx, tb, []string{"y"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, tb); err != nil {
		t.Fatal(err)
	}
	if tc, ok, _, err := a.Acquire(ctx); err != nil || !ok || tc != tb+1 {
		t.Fatalf("a after b's release: %d %v %v, want to lead with term %d", tc, ok, err, tb+1)
	}
	if _, remove, _ := a.LoadTasks(ctx); !slices.Equal(remove, []string{"x"}) {
		t.Fatalf("after ForgetTasks(y): removed %v, want [x]", remove)
	}
}

// The dedup window in the database: what one supervisor records (sent,
// then confirmed) another reads back; a key sent and never confirmed is
// uncertain; keys older than the window are pruned; Leader names the
// current leader. On PostgreSQL and on MariaDB.
func TestDedupLogAndLeader(t *testing.T) {
	for _, db := range []struct {
		name string
		dsn  func(testing.TB) string
	}{{"postgres", testenv.Postgres}, {"mariadb", mysqlURL}} {
		t.Run(db.name, func(t *testing.T) { dedupLog(t, db.dsn(t)) })
	}
}

func dedupLog(t *testing.T, dsn string) {
	ctx := context.Background()
	name := fmt.Sprintf("dedup-%d", time.Now().UnixNano())
	a := open(t, dsn, name, "a", time.Minute)
	b := open(t, dsn, name, "b", time.Minute)
	t.Cleanup(func() { _, _ = a.db.Exec(a.d.q(`DELETE FROM fulcrum_supervisor_dedup WHERE name = ?`), name) })
	if u, _, err := b.Leader(ctx); err != nil || u != "" {
		t.Fatalf("Leader before anyone leads = %q, %v", u, err)
	}
	term, ok, _, err := a.Acquire(ctx)
	if err != nil || !ok {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	if u, tm, err := b.Leader(ctx); err != nil || u != "ws://a/ws" || tm != term {
		t.Fatalf("Leader = %q term %d, %v; want ws://a/ws term %d", u, tm, err, term)
	}

	errs := make(chan error, 10)
	log := a.DedupLog(time.Hour, func(err error) { errs <- err })
	now := time.Now()
	old := now.Add(-2 * time.Hour).UnixNano()
	sent := []dedup.Entry{{Key: 1, At: now.UnixNano()}, {Key: 1 << 63, At: now.UnixNano()}, {Key: 3, At: now.UnixNano()}}
	if err := log.Sending(sent); err != nil {
		t.Fatal(err)
	}
	// 3 never confirmed; 4 older than the window (one call: one write,
	// after which the writer prunes, its first time); 1 twice in it (an
	// upsert must not see a key twice)
	if err := log.Append(append(sent[:2:2], dedup.Entry{Key: 4, At: old}, sent[0])); err != nil {
		t.Fatal(err)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	other := b.DedupLog(time.Hour, nil)
	defer other.Close()
	got, err := other.Load(ctx, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	keys := []uint64{}
	for _, e := range got {
		keys = append(keys, e.Key)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []uint64{1, 1 << 63}) {
		t.Fatalf("Load = %v, want keys 1 and 1<<63 (3 unconfirmed, 4 older than the window)", keys)
	}
	unsure, err := other.Uncertain(ctx)
	if err != nil || !slices.Equal(unsure, []uint64{3}) {
		t.Fatalf("Uncertain = %v, %v; want [3]", unsure, err)
	}
	// The key older than the window was pruned by the writer.
	all, err := other.Load(ctx, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		if e.Key == 4 {
			t.Fatal("a key older than the window was not pruned")
		}
	}
}
