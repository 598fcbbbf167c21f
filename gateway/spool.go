package gateway

import (
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

// spool is what a fast-path client connection writes to (cc.bw writes
// into it): a target's response goes into memory, then a temporary file,
// so the target's connection and permit go back as soon as the target is
// done, whatever the client's pace (nginx's proxy_buffering). The client
// then gets it at flush, each write bounded by timeouts.send (nginx's
// send_timeout), so a client that stops reading loses its connection
// instead of holding anything of a target's. A response past both limits
// is relayed at the client's pace from there on, as nginx does past
// proxy_max_temp_file_size; a streamed one (server-sent events,
// buffering.stream_paths, X-Accel-Buffering: no) is relayed as it comes.
//
// A response that fits cc.bw's own buffer never reaches the spool before
// flush: the common small response costs one write, as without it.
type spool struct {
	c        deadlineWriter // the client: its connection, or net/http's ResponseWriter
	sendTO   time.Duration
	deadline time.Time // the write deadline set on c
	now      time.Time // the caller's clock reading for the next write; zero: read it
	direct   bool      // writes go to c: flushing, streaming, or past the limits

	mem     *[]byte // borrowed from spoolBufs when a response outgrows cc.bw
	memMax  int
	file    *os.File
	fileN   int64
	fileMax int64
	dir     string
}

var spoolBufs sync.Pool // *[]byte

// deadlineWriter is where a spool's bytes go: a net.Conn, or a
// responseWriter.
type deadlineWriter interface {
	io.Writer
	SetWriteDeadline(time.Time) error
}

// responseWriter lets a spool write to net/http's ResponseWriter under the
// send timeout (HTTP/1.x and HTTP/2 alike, through ResponseController).
type responseWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
}

func (w responseWriter) SetWriteDeadline(t time.Time) error { return w.rc.SetWriteDeadline(t) }

func (s *spool) reset(c deadlineWriter, cfg *config.Config) {
	s.c = c
	s.sendTO = cfg.Timeouts.Send.D()
	s.deadline, s.now = time.Time{}, time.Time{}
	s.direct = false
	s.memMax = int(cfg.Buffering.Memory)
	s.fileMax = cfg.Buffering.TempFileLimit()
	s.dir = cfg.Buffering.TempDir
}

// empty reports whether nothing waits in the spool itself.
func (s *spool) empty() bool { return (s.mem == nil || len(*s.mem) == 0) && s.file == nil }

func (s *spool) Write(p []byte) (int, error) {
	if s.direct {
		return s.out(p)
	}
	if s.file == nil {
		if s.mem == nil {
			s.mem = borrowBuf(s.memMax)
		}
		if m := *s.mem; len(m)+len(p) <= s.memMax {
			*s.mem = append(m, p...)
			return len(p), nil
		}
		if s.fileMax > 0 {
			s.file, _ = os.CreateTemp(s.dir, "fulcrum-response-")
			if s.file != nil {
				// Unlinked at once: the descriptor is the only name it
				// needs, and a crash leaves nothing behind.
				_ = os.Remove(s.file.Name())
			}
		}
	}
	if s.file != nil && s.fileN+int64(len(p)) <= s.fileMax {
		n, err := s.file.Write(p)
		s.fileN += int64(n)
		if err == nil {
			return n, nil
		}
		p = p[n:] // a full disk: what is written stays, the rest goes direct
	}
	// Past both limits (or no file to be had): the rest goes at the
	// client's pace.
	if err := s.drain(); err != nil {
		return 0, err
	}
	s.direct = true
	return s.out(p)
}

// stream sends what the spool holds and passes what follows straight
// to the client, until the next flush.
func (s *spool) stream() error {
	if err := s.drain(); err != nil {
		return err
	}
	s.direct = true
	return nil
}

// drain writes what the spool holds to the client: memory, then file.
func (s *spool) drain() error {
	if s.mem != nil {
		m := *s.mem
		var err error
		if len(m) > 0 {
			_, err = s.out(m)
		}
		*s.mem = m[:0]
		spoolBufs.Put(s.mem)
		s.mem = nil
		if err != nil {
			s.drop()
			return err
		}
	}
	if s.file == nil {
		return nil
	}
	defer s.drop()
	if _, err := s.file.Seek(0, io.SeekStart); err != nil {
		return err
	}
	// In pieces, each under its own send timeout (sendfile where c is a
	// TCP connection): the timeout bounds a client that stops, not a
	// large response to a slow one.
	for n := s.fileN; n > 0; {
		s.arm()
		k, err := io.CopyN(s.c, s.file, min(n, 1<<20))
		n -= k
		if err != nil {
			return err
		}
	}
	return nil
}

// drop frees what the spool holds, unsent.
func (s *spool) drop() {
	if s.mem != nil {
		*s.mem = (*s.mem)[:0]
		spoolBufs.Put(s.mem)
		s.mem = nil
	}
	if s.file != nil {
		s.file.Close()
		s.file, s.fileN = nil, 0
	}
}

// out writes to the client under the send timeout.
func (s *spool) out(p []byte) (int, error) {
	s.arm()
	return s.c.Write(p)
}

// arm moves the write deadline when less than half of timeouts.send is
// left: once every send/2 for a busy connection instead of per write
// (timers are a visible share of a proxy's CPU), so a write may have
// between half and all of it.
func (s *spool) arm() {
	now := s.now
	if now.IsZero() {
		now = time.Now()
	}
	s.now = time.Time{}
	if s.deadline.Sub(now) < s.sendTO/2 {
		s.deadline = now.Add(s.sendTO)
		_ = s.c.SetWriteDeadline(s.deadline)
	}
}

func borrowBuf(size int) *[]byte {
	if b, _ := spoolBufs.Get().(*[]byte); b != nil && cap(*b) >= size {
		return b
	}
	b := make([]byte, 0, size)
	return &b
}

// flushOut sends everything written to cc.bw and the spool behind it.
func (cc *clientConn) flushOut() error {
	s := &cc.sp
	if err := s.drain(); err != nil {
		return err
	}
	s.direct = true
	err := cc.bw.Flush()
	s.direct = false
	return err
}
