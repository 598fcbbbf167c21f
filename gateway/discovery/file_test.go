package discovery

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// writeAtomic writes by rename, as editors and config tools do.
func writeAtomic(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestFileWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "targets.yaml")
	writeAtomic(t, path, `
- url: http://127.0.0.1:9001
  weight: 3
  started_at: 2026-11-23T10:00:00Z
- url: http://127.0.0.1:9002
  max_concurrency: 8
`)
	log, logs := newLog()
	r := watch(t, NewFile(path, log))
	r.await(t, "http://127.0.0.1:9001 w=3 started=10:00:00, http://127.0.0.1:9002 w=1 mc=8")

	// JSON, under "targets", written in place.
	if err := os.WriteFile(path, []byte(`{"targets": [{"url": "http://127.0.0.1:9002", "weight": 2}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r.await(t, "http://127.0.0.1:9002 w=2")

	// An invalid file is refused whole: the error, with its line, is
	// logged and the old list stays.
	sent := r.updates()
	writeAtomic(t, path, "- url: http://127.0.0.1:9003\n- url: ftp://nope\n  weight: 2\n")
	testenv.Eventually(t, "the refusal logged with the field and line", func() bool {
		return strings.Contains(logs.String(), "line 2: targets[1].url")
	})
	if r.updates() != sent {
		t.Fatalf("an invalid file was applied: %s", r.last())
	}

	// A vanished file keeps the old list too; a good one is applied.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the missing file logged", func() bool { return strings.Contains(logs.String(), "source unavailable") })
	writeAtomic(t, path, "- url: http://127.0.0.1:9004\n")
	r.await(t, "http://127.0.0.1:9004 w=1")
	if r.updates() != sent+1 {
		t.Fatalf("%d lists sent since the refusal, want 1", r.updates()-sent)
	}
	// The outage (the file missing) and the recovery: one line each.
	testenv.Eventually(t, "the recovery logged", func() bool { return strings.Contains(logs.String(), "source answers again") })
	if out := logs.String(); strings.Count(out, "source unavailable") != 1 || strings.Count(out, "source answers again") != 1 {
		t.Fatalf("want the outage and the recovery logged once each:\n%s", out)
	}
}

func TestFileLookupErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := NewFile(filepath.Join(dir, "none.yaml"), newLogDiscard()).Lookup(t.Context()); err == nil {
		t.Fatal("Lookup of a missing file succeeded")
	}
	path := filepath.Join(dir, "dup.yaml")
	writeAtomic(t, path, "- url: http://127.0.0.1:9001\n- url: http://127.0.0.1:9001\n")
	_, err := NewFile(path, newLogDiscard()).Lookup(t.Context())
	if err == nil || !strings.Contains(err.Error(), "repeats targets[0]") {
		t.Fatalf("Lookup of a repeated target = %v", err)
	}
}
