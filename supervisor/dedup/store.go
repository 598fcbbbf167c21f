package dedup

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Entry is one remembered key and when it was first published (unix ns).
type Entry struct {
	Key uint64
	At  int64
}

// Store keeps the window outside the process, so that a restarted
// supervisor (or the next leader) knows what was already published.
type Store interface {
	// Load returns the entries recorded at or after since.
	Load(ctx context.Context, since time.Time) ([]Entry, error)
	// Sending notes entries about to be handed to the destination, not yet
	// confirmed: not published as far as Load is concerned, but a crash
	// before their Append leaves them uncertain (FileStore counts them;
	// a store may ignore them).
	Sending(entries []Entry) error
	// Append records entries the sink has delivered. It is called on the
	// sink's delivery goroutine right after the destination confirmed
	// them, so it must be quick (a store with a slow backend queues). A
	// store may hold them until the next Sending or Flush (they are
	// uncertain until written, never lost).
	Append(entries []Entry) error
	// Flush writes what Append holds; the sink calls it when it has
	// nothing more to send.
	Flush() error
	// Close flushes what is queued and releases the store.
	Close() error
}

// Restore puts loaded entries into d as if they had been sighted at their
// time: those older than the window at now are skipped.
func (d *Deduper) Restore(entries []Entry, now time.Time) int {
	n := 0
	t := now.UnixNano()
	for _, e := range entries {
		if d.window > 0 && t-e.At >= int64(d.window) {
			continue
		}
		s := &d.shards[e.Key&d.mask]
		s.mu.Lock()
		if at, ok := s.seen[e.Key]; !ok || e.At > at {
			s.seen[e.Key] = e.At
			s.order.push(entry{key: e.Key, at: e.At})
			for len(s.seen) > s.max {
				s.evictOldest()
			}
			n++
		}
		s.mu.Unlock()
	}
	return n
}

// entrySize: key, at, little-endian uint64 each. A negative at marks a
// key being sent (Sending), its time negated.
const entrySize = 16

// FileStore keeps the window in two append-only segment files, path and
// path.old, of 16 bytes per key: a single supervisor's store. Writes are
// plain write(2) calls, with no fsync: they survive the process being
// killed (the kernel has them), not the machine losing power. Every
// window the current segment becomes the old one and the previous old one
// is deleted, so the files hold between one and two windows of keys.
type FileStore struct {
	path   string
	window time.Duration

	mu      sync.Mutex
	f       *os.File
	started time.Time // when the current segment began
	buf     []byte    // delivered records not yet written (Append), then the write's bytes
}

// OpenFile opens (creating it and its folder) the store at path. A torn last record (a crash
// in the middle of a write) is ignored.
func OpenFile(path string, window time.Duration) (*FileStore, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("dedup.path: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("dedup.path: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("dedup.path: %w", err)
	}
	if rem := st.Size() % entrySize; rem != 0 {
		// A torn record: cut it, so later appends stay aligned.
		if err := f.Truncate(st.Size() - rem); err != nil {
			f.Close()
			return nil, fmt.Errorf("dedup.path: %w", err)
		}
	}
	// The segment began at its first record, not at this open: a
	// supervisor restarted more often than every window still rotates.
	started := time.Now()
	if first, err := readSegmentHead(path); err == nil && first != 0 {
		started = time.Unix(0, first)
	}
	return &FileStore{path: path, window: window, f: f, started: started}, nil
}

// readSegmentHead is the time of a segment's first record (0: none).
func readSegmentHead(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var rec [entrySize]byte
	if _, err := io.ReadFull(f, rec[:]); err != nil {
		return 0, err
	}
	at := int64(binary.LittleEndian.Uint64(rec[8:]))
	return max(at, -at), nil
}

// Load reads both segments: the delivered keys.
func (s *FileStore) Load(_ context.Context, since time.Time) ([]Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	done, _, err := ReadFile(s.path, since)
	return done, err
}

// ReadFile reads a FileStore's segments at path without opening it for
// writing: the keys delivered since since, and the uncertain ones: being
// sent, never confirmed (the process stopped between handing them to the
// destination and its confirmation). A replay of an uncertain key is
// published again, so a destination without a duplicate check may have it
// twice.
func ReadFile(path string, since time.Time) (done []Entry, uncertain []Entry, err error) {
	sending := map[uint64]int64{}
	for _, p := range []string{path + ".old", path} {
		es, err := readSegment(p, since.UnixNano())
		if err != nil {
			return nil, nil, err
		}
		for _, e := range es {
			if e.At < 0 {
				sending[e.Key] = -e.At
				continue
			}
			delete(sending, e.Key)
			done = append(done, e)
		}
	}
	for k, at := range sending {
		uncertain = append(uncertain, Entry{Key: k, At: at})
	}
	return done, uncertain, nil
}

func readSegment(path string, since int64) ([]Entry, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dedup.path: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<16)
	var rec [entrySize]byte
	var out []Entry
	for {
		if _, err := io.ReadFull(r, rec[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return out, nil // the end, or a torn last record
			}
			return nil, fmt.Errorf("dedup.path: %s: %w", path, err)
		}
		e := Entry{Key: binary.LittleEndian.Uint64(rec[:8]), At: int64(binary.LittleEndian.Uint64(rec[8:]))}
		if e.At >= since || -e.At >= since {
			out = append(out, e)
		}
	}
}

// Sending writes entries as being sent, together with the delivered ones
// Append holds: one write call per batch the sink sends, so the window
// costs the publish path one system call per batch, not two.
func (s *FileStore) Sending(entries []Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = appendEntries(s.buf, entries, -1)
	return s.writeLocked()
}

// Append holds entries as delivered until the next Sending or Flush.
func (s *FileStore) Append(entries []Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = appendEntries(s.buf, entries, 1)
	return nil
}

// Flush writes what Append holds.
func (s *FileStore) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeLocked()
}

func appendEntries(buf []byte, entries []Entry, sign int64) []byte {
	for _, e := range entries {
		buf = binary.LittleEndian.AppendUint64(buf, e.Key)
		buf = binary.LittleEndian.AppendUint64(buf, uint64(sign*e.At))
	}
	return buf
}

func (s *FileStore) writeLocked() error {
	if len(s.buf) == 0 {
		return nil
	}
	if s.f == nil {
		return errors.New("dedup: store closed")
	}
	if s.window > 0 && time.Since(s.started) >= s.window {
		if err := s.rotate(); err != nil {
			return err
		}
	}
	_, err := s.f.Write(s.buf)
	s.buf = s.buf[:0]
	return err
}

// rotate makes the current segment the old one: every key in the deleted
// old segment is more than a window old.
func (s *FileStore) rotate() error {
	if err := s.f.Close(); err != nil {
		return err
	}
	s.f = nil
	if err := os.Rename(s.path, s.path+".old"); err != nil {
		return fmt.Errorf("dedup: rotate: %w", err)
	}
	f, err := os.OpenFile(s.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("dedup: rotate: %w", err)
	}
	s.f, s.started = f, time.Now()
	return nil
}

// Close writes what Append holds and closes the file.
func (s *FileStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.writeLocked()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	s.f = nil
	return err
}
