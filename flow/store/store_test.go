package store_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fulcrum-lb/fulcrum/flow/store"
	"github.com/fulcrum-lb/fulcrum/flow/store/storetest"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// factory opens SQLStores on dsn and drops each prefix's tables when the
// test that first used it ends.
func factory(dsn func(t testing.TB) string) storetest.Factory {
	return prefixFactory(func(t testing.TB, _ string) string { return dsn(t) })
}

// prefixFactory is factory with a DSN per table prefix.
func prefixFactory(dsn func(t testing.TB, prefix string) string) storetest.Factory {
	var mu sync.Mutex
	dropped := map[string]bool{}
	return storetest.Factory{Open: func(t testing.TB, prefix string, opts store.Options) store.Store {
		t.Helper()
		s, err := store.Open(context.Background(), dsn(t, prefix), withPrefix(opts, prefix))
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		first := !dropped[prefix]
		dropped[prefix] = true
		mu.Unlock()
		t.Cleanup(func() {
			if first {
				s.DropTables(context.Background())
			}
			s.Close()
		})
		return s
	}}
}

func withPrefix(o store.Options, p string) store.Options { o.TablePrefix = p; return o }

func TestSQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	storetest.Run(t, prefixFactory(func(_ testing.TB, prefix string) string {
		// A file per prefix: a subtest's stores (its "servers") share
		// one, and the parallel subtests do not queue on each other's
		// writes, as they did on one file for all: on a starved machine
		// some waited past busy_timeout (SQLITE_BUSY in five subtests of
		// one run).
		return "sqlite://" + filepath.Join(dir, prefix+"flow.db")
	}))
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	storetest.Run(t, factory(func(t testing.TB) string { return testenv.Postgres(t) }))
}

func TestMySQL(t *testing.T) {
	t.Parallel()
	storetest.Run(t, factory(func(t testing.TB) string { return "mysql://" + testenv.MySQL(t) }))
}

// The claim relies on READ COMMITTED (no gap locks); the DSN alone says
// REPEATABLE READ on a default server.
func TestMySQLSessionIsReadCommitted(t *testing.T) {
	s, err := store.Open(context.Background(), "mysql://"+testenv.MySQL(t), store.Options{TablePrefix: storetest.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		s.DropTables(context.Background())
		s.Close()
	}()
	var iso string
	if err := s.DB().QueryRow("SELECT @@SESSION.tx_isolation").Scan(&iso); err != nil {
		if err := s.DB().QueryRow("SELECT @@SESSION.transaction_isolation").Scan(&iso); err != nil {
			t.Fatal(err)
		}
	}
	if iso != "READ-COMMITTED" {
		t.Fatalf("session isolation = %s, want READ-COMMITTED", iso)
	}
}

// mysql:// takes a URL as well as the driver's own DSN; a bare path gets a
// hint to write sqlite://.
func TestOpenURLForms(t *testing.T) {
	testenv.MySQL(t) // skips without MariaDB
	p := storetest.Prefix()
	s, err := store.Open(context.Background(), "mysql://root@127.0.0.1:3306/test?timeout=5s", store.Options{TablePrefix: p})
	if err != nil {
		t.Fatalf("URL form: %v", err)
	}
	s.DropTables(context.Background())
	s.Close()
	_, err = store.Open(context.Background(), "data/flow.db", store.Options{})
	if err == nil || !strings.Contains(err.Error(), "write sqlite://data/flow.db") {
		t.Fatalf("bare path: %v, want a sqlite:// hint", err)
	}
}
