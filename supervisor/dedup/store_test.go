package dedup

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func keysOf(es []Entry) []uint64 {
	ks := make([]uint64, len(es))
	for i, e := range es {
		ks[i] = e.Key
	}
	slices.Sort(ks)
	return ks
}

// What one process records, the next reads back: delivered keys are
// restored into a Deduper (a replay of them is a duplicate), a key sent and
// never confirmed is uncertain, and a torn last record (a kill in the
// middle of a write) is ignored.
func TestFileStoreAcrossRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "window") // the folder is created
	now := time.Now()
	at := now.UnixNano()
	s, err := OpenFile(path, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	k1, k2, k3 := Key("r", "1", nil), Key("r", "2", nil), Key("r", "3", nil)
	if err := s.Sending([]Entry{{k1, at}, {k2, at}, {k3, at}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Append([]Entry{{k1, at}, {k2, at}}); err != nil { // k3 in flight at the "crash"
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{1, 2, 3}); err != nil { // a torn record
		t.Fatal(err)
	}
	f.Close()

	done, unsure, err := ReadFile(path, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(done); !slices.Equal(got, keysOf([]Entry{{Key: k1}, {Key: k2}})) {
		t.Fatalf("delivered %v, want k1 and k2", got)
	}
	if len(unsure) != 1 || unsure[0].Key != k3 {
		t.Fatalf("uncertain %v, want k3", unsure)
	}
	s, err = OpenFile(path, time.Hour) // cuts the torn record
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Append([]Entry{{k3, at}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	done, unsure, err = ReadFile(path, now.Add(-time.Hour))
	if err != nil || len(done) != 3 || len(unsure) != 0 {
		t.Fatalf("after the torn record was cut: %d delivered, %d uncertain, %v; want 3, 0", len(done), len(unsure), err)
	}
	d := New(time.Hour, 100)
	if n := d.Restore(done, now); n != 3 {
		t.Fatalf("restored %d keys, want 3", n)
	}
	if d.First("r", "2", nil, now) {
		t.Fatal("a replay of a published message passed the restored window")
	}
	if !d.First("r", "4", nil, now) {
		t.Fatal("a new message taken for a duplicate")
	}
}

// Keys older than the window are not restored, and the file rotates every
// window, so it holds one to two windows of keys.
func TestFileStoreWindowAndRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "window")
	now := time.Now()
	const window = time.Minute
	s, err := OpenFile(path, window)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	old := now.Add(-3 * window).UnixNano()
	if err := s.Append([]Entry{{1, old}, {2, now.UnixNano()}}); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := ReadFile(path, time.Unix(0, 0)); len(got) != 0 {
		t.Fatalf("Append wrote %d keys at once; it holds them for the next Sending or Flush", len(got))
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	d := New(window, 100)
	done, _, err := ReadFile(path, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if n := d.Restore(done, now); n != 1 {
		t.Fatalf("restored %d, want 1: the key older than the window is skipped", n)
	}
	s.started = now.Add(-2 * window)                                // the segment is a window old: the next append rotates
	if err := s.Sending([]Entry{{3, now.UnixNano()}}); err != nil { // written at once
		t.Fatal(err)
	}
	if err := s.Append([]Entry{{3, now.UnixNano()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".old"); err != nil {
		t.Fatalf("no old segment after rotation: %v", err)
	}
	s.started = now.Add(-2 * window)
	if err := s.Append([]Entry{{4, now.UnixNano()}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil { // 3's and 4's records; the first segment is deleted
		t.Fatal(err)
	}
	done, _, err = ReadFile(path, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(done); !slices.Equal(got, []uint64{3, 4}) {
		t.Fatalf("after two rotations the files hold %v, want [3 4]", got)
	}
}

// BenchmarkFileStoreAppend is the cost of the window's file per delivered
// message, in batches of 64 (sent, then delivered: one write per batch).
func BenchmarkFileStoreAppend(b *testing.B) {
	s, err := OpenFile(filepath.Join(b.TempDir(), "window"), time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	batch := make([]Entry, 64)
	at := time.Now().UnixNano()
	b.ReportAllocs()
	for i := 0; i < b.N; i += len(batch) {
		for j := range batch {
			batch[j] = Entry{uint64(i + j), at}
		}
		_ = s.Sending(batch)
		_ = s.Append(batch)
	}
}
