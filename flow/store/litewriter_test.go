package store

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// One group: a write that fails is undone alone, the others commit, each
// caller hears its own outcome, and a caller gone before its turn does
// nothing.
func TestGroupCommitIsolatesWrites(t *testing.T) {
	s, err := Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "g.db"), Options{TablePrefix: "g_"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.w.Exec("CREATE TABLE kv (k TEXT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Hold the writer so that the next writes queue and form one group.
	blocked, release := make(chan struct{}), make(chan struct{})
	go liteOf(s).lw.do(ctx, func(ctx context.Context, tx *sql.Tx) error { close(blocked); <-release; return nil })
	<-blocked
	insert := func(k string) func(context.Context, *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO kv (k) VALUES (?)", k); err != nil {
				return err
			}
			if k == "b" { // a write that fails after changing something
				_, err := tx.ExecContext(ctx, "INSERT INTO kv (k) VALUES ('a')")
				return err
			}
			return nil
		}
	}
	gone, cancel := context.WithCancel(ctx)
	results := make([]error, 4)
	var wg sync.WaitGroup
	for i, k := range []string{"a", "b", "c", "d"} {
		wg.Add(1)
		c := ctx
		if k == "d" {
			c = gone
		}
		go func() { defer wg.Done(); results[i] = liteOf(s).lw.do(c, insert(k)) }()
		testenv.Eventually(t, "write queued", func() bool { return len(liteOf(s).lw.ops) == i+1 })
	}
	cancel() // d's caller leaves before its turn
	close(release)
	wg.Wait()
	if results[0] != nil || results[1] == nil || results[2] != nil || !errors.Is(results[3], context.Canceled) {
		t.Fatalf("results %v; want a ok, b failed, c ok, d cancelled", results)
	}
	if keys := storedKeys(t, s); keys != "a c" {
		t.Fatalf("stored %q; want \"a c\" (b undone whole, d never run)", keys)
	}
}

// The group commit relaxes synchronous only inside its groups (the syncer
// fsyncs the WAL for them): a write outside a group still runs under FULL.
func TestGroupCommitKeepsFullOutsideGroups(t *testing.T) {
	s, err := Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "g.db"), Options{TablePrefix: "g_"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if liteOf(s).lw.walPath == "" {
		t.Fatal("synchronous=FULL (the default) should fsync the WAL in the syncer")
	}
	ctx := context.Background()
	var inGroup int
	if err := liteOf(s).lw.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&inGroup)
	}); err != nil {
		t.Fatal(err)
	}
	var outside int
	if err := s.w.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&outside); err != nil {
		t.Fatal(err)
	}
	if inGroup != 1 || outside != 2 { // 1 NORMAL, 2 FULL
		t.Fatalf("synchronous in a group %d, outside %d; want 1 (NORMAL, the syncer fsyncs) and 2 (FULL)", inGroup, outside)
	}
	n, err := Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "n.db")+"?synchronous=normal", Options{TablePrefix: "g_"})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if liteOf(n).lw.walPath != "" {
		t.Fatal("synchronous=normal asked for: nothing should fsync the WAL per group")
	}
}

// liteOf is the SQLite driver of a store opened on sqlite://.
func liteOf(s *SQLStore) *liteDriver { return s.drv.(*liteDriver) }

// Another process that keeps the file's write lock past busy_timeout does
// not fail the writes waiting for it: a write waits for as long as its
// caller does, and one whose caller leaves fails and changes nothing.
func TestGroupCommitWaitsOutAnotherWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	s, err := Open(context.Background(), "sqlite://"+path, Options{TablePrefix: "g_"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.w.Exec("CREATE TABLE kv (k TEXT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	// A short timeout on the one writer connection, so that the lock below
	// outlasts several of them.
	if _, err := s.w.Exec("PRAGMA busy_timeout = 20"); err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	otx, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := otx.Exec("INSERT INTO kv (k) VALUES ('other')"); err != nil {
		t.Fatal(err)
	}
	insert := func(k string) func(context.Context, *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO kv (k) VALUES (?)", k)
			return err
		}
	}
	// The lock is held for 15 of the writer's timeouts: the caller who
	// gives up at 300 ms has seen them run out.
	gone, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	waited, left := make(chan error, 1), make(chan error, 1)
	go func() { waited <- liteOf(s).lw.do(ctx, insert("waited")) }()
	go func() { left <- liteOf(s).lw.do(gone, insert("gone")) }()
	<-gone.Done()
	if err := otx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("the write that waited: %v", err)
	}
	if err := <-left; err == nil {
		t.Fatal("the write whose caller left succeeded")
	}
	if keys := storedKeys(t, s); keys != "other waited" {
		t.Fatalf("stored %q; want \"other waited\"", keys)
	}
}

// storedKeys is table kv's keys in order, space-separated.
func storedKeys(t *testing.T, s *SQLStore) string {
	t.Helper()
	rows, err := s.r.Query("SELECT k FROM kv ORDER BY k")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(keys, " ")
}
