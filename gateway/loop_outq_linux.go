//go:build linux

package gateway

import (
	"os"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

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
	p, err := q.next()
	if err != nil {
		return 0, err
	}
	n, err := writeFD(fd, p)
	q.advance(n)
	return n, err
}

// next is what goes out next: memory, else the next piece of the file
// read into memory. Empty when nothing is pending.
func (q *outq) next() ([]byte, error) {
	if q.r == len(q.mem) && q.fileActive() {
		if q.big == nil {
			q.big = borrowBuf(q.memMax)
		}
		buf := (*q.big)[:min(int64(cap(*q.big)), q.fw-q.fr)]
		k, err := q.file.ReadAt(buf, q.fr)
		if k == 0 && err != nil {
			return nil, err
		}
		q.mem, q.r = buf[:k], 0
		q.fr += int64(k)
		if q.fr == q.fw {
			q.fr, q.fw = 0, 0 // the file is empty again: reuse it from its start
		}
	}
	return q.mem[q.r:], nil
}

// advance drops n bytes of what next gave, once they went out.
func (q *outq) advance(n int) {
	q.r += n
	if q.r == len(q.mem) {
		q.mem, q.r = q.mem[:0], 0
	}
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
	n, err := rawWrite(fd, p)
	return max(n, 0), err
}
