//go:build linux

package gateway

import (
	"math"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

// wheel is a loop's hashed timer wheel: every connection has at most one
// timer (what bounds it now: read_header, idle, response_header, send),
// kept in an intrusive list per slot, so arming, moving and cancelling
// cost O(1) and nothing is allocated. A timer fires up to one tick late.
type wheel struct {
	base  time.Time
	slots [wheelSlots]*lconn
	cur   int64 // the last tick processed
	next  int64 // no timer is due before this tick (a lower bound)
	n     int   // timers armed
	due   []firing
}

type firing struct {
	c    *lconn
	gen  uint32
	kind uint8
}

const (
	wheelTick  = 10 * time.Millisecond
	wheelSlots = 1024
)

func (w *wheel) init(now time.Time) {
	w.base, w.next = now, math.MaxInt64
}

func (w *wheel) tick(t time.Time) int64 { return int64(t.Sub(w.base) / wheelTick) }

// arm sets c's timer to kind at due, replacing the one it had.
func (w *wheel) arm(c *lconn, kind uint8, due time.Time) {
	w.disarm(c)
	t := w.tick(due) + 1 // never early
	if t <= w.cur {
		t = w.cur + 1
	}
	c.tdue, c.tkind, c.tlinked = t, kind, true
	s := &w.slots[t%wheelSlots]
	c.tprev, c.tnext = nil, *s
	if *s != nil {
		(*s).tprev = c
	}
	*s = c
	w.n++
	w.next = min(w.next, t)
}

func (w *wheel) disarm(c *lconn) {
	if !c.tlinked {
		c.tkind = tmNone
		return
	}
	if c.tprev != nil {
		c.tprev.tnext = c.tnext
	} else {
		w.slots[c.tdue%wheelSlots] = c.tnext
	}
	if c.tnext != nil {
		c.tnext.tprev = c.tprev
	}
	c.tnext, c.tprev, c.tlinked, c.tkind = nil, nil, false, tmNone
	w.n--
}

// timeout is epoll_wait's timeout in milliseconds: until the earliest
// timer may be due, or -1 with none armed.
func (w *wheel) timeout(now time.Time) int {
	if w.n == 0 {
		return -1
	}
	d := w.base.Add(time.Duration(w.next) * wheelTick).Sub(now)
	if d <= 0 {
		return 0
	}
	return int((d + time.Millisecond - 1) / time.Millisecond)
}

// expire fires the timers due by now.
func (w *wheel) expire(now time.Time, fire func(*lconn, uint8)) {
	t := w.tick(now)
	if t < w.next || t <= w.cur {
		w.cur = max(w.cur, min(t, w.next-1))
		return
	}
	from, to := w.cur+1, t
	if to-from >= wheelSlots {
		from = to - wheelSlots + 1
	}
	w.due = w.due[:0]
	for k := from; k <= to; k++ {
		for c := w.slots[k%wheelSlots]; c != nil; {
			nx := c.tnext
			if c.tdue <= t {
				w.due = append(w.due, firing{c, c.gen, c.tkind})
				w.disarm(c)
			}
			c = nx
		}
	}
	w.cur = t
	w.next = math.MaxInt64
	if w.n > 0 {
		for _, c := range w.slots {
			for ; c != nil; c = c.tnext {
				w.next = min(w.next, c.tdue)
			}
		}
	}
	for i, f := range w.due {
		if !f.c.closed && f.c.gen == f.gen {
			fire(f.c, f.kind)
		}
		w.due[i] = firing{}
	}
}

// outq is a loop client connection's response queue, the loop's form of
// spool.go: a target's response goes into memory (buffering.memory),
// then an unlinked temporary file (buffering.max_temp_file), so the
// target is read at its own pace and its permit goes back when it is
// done; past both, the target is read at the client's pace. A stream
// (server-sent events, X-Accel-Buffering: no, buffering.stream_paths)
// uses memory only, so it reaches the client as it comes.
type outq struct {
	mem     []byte
	r       int
	big     *[]byte // mem's buffer when borrowed from spoolBufs
	file    *os.File
	fr, fw  int64
	memMax  int
	fileMax int64
	dir     string
	stream  bool
	small   [2048]byte
}

func (q *outq) reset(cfg *config.Config) {
	q.memMax = int(cfg.Buffering.Memory)
	q.fileMax = cfg.Buffering.TempFileLimit()
	q.dir = cfg.Buffering.TempDir
	q.release()
}

func (q *outq) pending() bool { return q.r < len(q.mem) || q.fr < q.fw }

func (q *outq) fileActive() bool { return q.file != nil && q.fr < q.fw }

// room is how many bytes add takes now.
func (q *outq) room() int {
	used := len(q.mem) - q.r
	if !q.fileActive() && used < q.memMax {
		return q.memMax - used
	}
	if q.stream || q.fileMax == 0 {
		return 0
	}
	return int(min(q.fileMax-q.fw, 1<<20))
}

// Write takes a head (through the connection's bufio.Writer): always.
func (q *outq) Write(p []byte) (int, error) {
	if q.fileActive() {
		return q.toFile(p)
	}
	q.toMem(p)
	return len(p), nil
}

// add takes body bytes, at most room.
func (q *outq) add(p []byte) error {
	if q.fileActive() {
		_, err := q.toFile(p)
		return err
	}
	k := min(len(p), max(q.memMax-(len(q.mem)-q.r), 0))
	if k == len(p) || q.stream || q.fileMax == 0 {
		q.toMem(p)
		return nil
	}
	q.toMem(p[:k])
	_, err := q.toFile(p[k:])
	return err
}

func (q *outq) toMem(p []byte) {
	if q.r > 0 && q.r == len(q.mem) {
		q.mem, q.r = q.mem[:0], 0
	}
	if q.mem == nil {
		q.mem = q.small[:0]
	}
	if len(q.mem)+len(p) > cap(q.mem) && q.big == nil {
		q.big = borrowBuf(max(q.memMax, len(q.mem)+len(p)))
		q.mem = append((*q.big)[:0], q.mem[q.r:]...)
		q.r = 0
	}
	q.mem = append(q.mem, p...)
}

func (q *outq) toFile(p []byte) (int, error) {
	if q.file == nil {
		f, err := os.CreateTemp(q.dir, "fulcrum-response-")
		if err != nil {
			return 0, err
		}
		_ = os.Remove(f.Name()) // unlinked: a crash leaves nothing behind
		q.file = f
	}
	n, err := q.file.WriteAt(p, q.fw)
	q.fw += int64(n)
	return n, err
}

// writeTo writes queued bytes to fd once: memory, else the next piece of
// the file.
func (q *outq) writeTo(fd int) (int, error) {
	if q.r == len(q.mem) && q.fileActive() {
		if q.big == nil {
			q.big = borrowBuf(q.memMax)
		}
		buf := (*q.big)[:min(int64(cap(*q.big)), q.fw-q.fr)]
		k, err := q.file.ReadAt(buf, q.fr)
		if k == 0 && err != nil {
			return 0, err
		}
		q.mem, q.r = buf[:k], 0
		q.fr += int64(k)
		if q.fr == q.fw {
			q.fr, q.fw = 0, 0 // the file is empty again: reuse it from its start
		}
	}
	n, err := writeFD(fd, q.mem[q.r:])
	if n > 0 {
		q.r += n
	}
	if q.r == len(q.mem) {
		q.mem, q.r = q.mem[:0], 0
	}
	return n, err
}

// release frees what the queue holds.
func (q *outq) release() {
	if q.big != nil {
		*q.big = (*q.big)[:0]
		spoolBufs.Put(q.big)
		q.big = nil
	}
	q.mem, q.r = q.small[:0], 0
	if q.file != nil {
		q.file.Close()
		q.file = nil
	}
	q.fr, q.fw, q.stream = 0, 0, false
}

// writeFD writes once; n is never negative.
func writeFD(fd int, p []byte) (int, error) {
	n, err := unix.Write(fd, p)
	return max(n, 0), err
}
