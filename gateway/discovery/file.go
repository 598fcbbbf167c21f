package discovery

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

// File reads a YAML or JSON list of targets and watches it. The list has
// the fields of a config target (url, weight, max_concurrency, warmup,
// disabled, started_at), bare or under "targets:". An invalid file is
// refused whole, the error logged and the last good list kept.
type File struct {
	path string
	log  *slog.Logger
}

// NewFile builds a file source.
func NewFile(path string, log *slog.Logger) *File { return &File{path: path, log: log} }

// Source is "file".
func (f *File) Source() string { return "file" }

// maxFile bounds what a target file may make the gateway read.
const maxFile = 4 << 20

// Lookup reads and validates the file once.
func (f *File) Lookup(context.Context) ([]Target, error) {
	data, err := f.read()
	if err != nil {
		return nil, err
	}
	return parseFile(f.path, data)
}

func (f *File) read() ([]byte, error) {
	fh, err := os.Open(f.path)
	if err != nil {
		return nil, fmt.Errorf("discovery: file: %w", err)
	}
	defer fh.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(fh, maxFile+1)); err != nil {
		return nil, fmt.Errorf("discovery: file: %s: %w", f.path, err)
	}
	if b.Len() > maxFile {
		return nil, fmt.Errorf("discovery: file: %s is over %d bytes", f.path, maxFile)
	}
	return b.Bytes(), nil
}

func parseFile(path string, data []byte) ([]Target, error) {
	cts, err := config.ParseTargets(data)
	if err != nil {
		return nil, fmt.Errorf("discovery: file: %s: %w", path, err)
	}
	ts := make([]Target, len(cts))
	for i, c := range cts {
		ts[i] = Target{URL: c.URL, Weight: c.W(), MaxConcurrency: c.MaxConcurrency, Warmup: c.Warmup.D(),
			Disabled: c.Disabled, StartedAt: c.StartedAt.Time}
	}
	sortTargets(ts)
	return ts, nil
}

// Watch reads the file now and whenever its directory changes. It
// watches the directory, not the file, so a file replaced by rename (how
// editors and Kubernetes ConfigMaps write) is still seen.
func (f *File) Watch(ctx context.Context, update func([]Target)) {
	s := sender{update: update}
	var last []byte
	out := outage{log: f.log, msg: "discovery: file", attrs: []any{"path", f.path}}
	load := func() {
		data, err := f.read()
		if err != nil {
			out.fail(err)
			return
		}
		out.ok()
		if last != nil && bytes.Equal(data, last) {
			return
		}
		ts, err := parseFile(f.path, data)
		if err != nil {
			f.log.Error("discovery: file: refused; keeping the last good targets", "path", f.path, "err", err)
			last = data // the same bad bytes are not logged again
			return
		}
		last = data
		s.send(ts)
	}
	for ctx.Err() == nil {
		w, err := fsnotify.NewWatcher()
		if err == nil {
			err = w.Add(filepath.Dir(f.path))
			if err != nil {
				w.Close()
			}
		}
		if err != nil {
			f.log.Warn("discovery: file: cannot watch; retrying", "path", f.path, "err", err)
			if !sleep(ctx, 5*time.Second) {
				return
			}
			continue
		}
		load() // after the watch is set, so no change between is missed
		f.loop(ctx, w, load)
		w.Close()
	}
}

// loop applies changes until ctx ends or the watcher fails.
func (f *File) loop(ctx context.Context, w *fsnotify.Watcher, load func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-w.Events:
			if !ok {
				return
			}
			// Any event in the directory may be our file (a rename, a
			// symlink swap); re-reading is cheap and unchanged bytes are
			// skipped. Drain a burst of events first.
			for drained := false; !drained; {
				select {
				case <-w.Events:
				default:
					drained = true
				}
			}
			load()
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			f.log.Warn("discovery: file: watch error; re-reading", "path", f.path, "err", err)
			load()
		}
	}
}

var _ Provider = (*File)(nil)
