package probe

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// Header is the response header a target reports its load in:
//
//	Fulcrum-Load: inflight=3;latency_ms=12.5
//
// inflight: the requests it is serving as it answers, from every client,
// the answered one not counted (an integer, 0 or more). latency_ms: its
// estimate of its latency now, in milliseconds (a decimal, 0 or more; 0
// or absent when it has none). Keys are separated by ';', spaces around
// them are ignored, and keys this version does not know are skipped, so
// a later version can add some.
const Header = "Fulcrum-Load"

// Format writes a report as the header's value.
func Format(l balance.LoadReport) string {
	ms := strconv.FormatFloat(float64(l.Latency)/float64(time.Millisecond), 'f', -1, 64)
	return "inflight=" + strconv.FormatInt(l.InFlight, 10) + ";latency_ms=" + ms
}

// Parse reads the header's value. A malformed value is an error naming
// the key and the value; inflight is required.
func Parse(v string) (balance.LoadReport, error) {
	var l balance.LoadReport
	seen := false
	for part := range strings.SplitSeq(v, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		key, val, ok := strings.Cut(part, "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if !ok {
			return balance.LoadReport{}, fmt.Errorf("%s: %q is not key=value", Header, part)
		}
		switch key {
		case "inflight":
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil || n < 0 {
				return balance.LoadReport{}, fmt.Errorf("%s: inflight: %q is not a count (an integer, 0 or more)", Header, val)
			}
			l.InFlight, seen = n, true
		case "latency_ms":
			ms, err := strconv.ParseFloat(val, 64)
			if err != nil || ms < 0 || math.IsNaN(ms) || ms > float64(math.MaxInt64/int64(time.Millisecond)) {
				return balance.LoadReport{}, fmt.Errorf("%s: latency_ms: %q is not a duration in milliseconds (a number, 0 or more)", Header, val)
			}
			l.Latency = time.Duration(ms * float64(time.Millisecond))
		}
	}
	if !seen {
		return balance.LoadReport{}, fmt.Errorf("%s: inflight missing in %q", Header, v)
	}
	return l, nil
}

// FromHeader returns the report in h, and whether there is a valid one:
// a target that sends none (or a malformed one) is ranked by what the
// gateway itself sees of it.
func FromHeader(h http.Header) (balance.LoadReport, bool) {
	v := h.Get(Header)
	if v == "" {
		return balance.LoadReport{}, false
	}
	l, err := Parse(v)
	return l, err == nil
}

// Handler wraps a target's handler so that every response reports the
// target's load in Header: the requests next is serving (the answered
// one not counted) and the mean time next took over recent requests
// (an EWMA, alpha 1/8, from the call to its return).
func Handler(next http.Handler) http.Handler {
	m := &meter{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.inflight.Add(1)
		t0 := time.Now()
		rw := &reportWriter{ResponseWriter: w, m: m}
		defer func() {
			m.inflight.Add(-1)
			m.observe(time.Since(t0))
		}()
		next.ServeHTTP(rw, r)
		if !rw.wrote {
			rw.WriteHeader(http.StatusOK) // what net/http would write: with the report
		}
	})
}

// meter is one wrapped handler's load.
type meter struct {
	inflight atomic.Int64
	lat      atomic.Int64 // EWMA, ns; 0 = none yet
}

func (m *meter) observe(d time.Duration) {
	// Concurrent updates may lose a sample; the mean tolerates that.
	if old := m.lat.Load(); old == 0 {
		m.lat.Store(int64(d))
	} else {
		m.lat.Store(old + (int64(d)-old)/8)
	}
}

func (m *meter) report() balance.LoadReport {
	return balance.LoadReport{InFlight: max(m.inflight.Load()-1, 0), Latency: time.Duration(m.lat.Load())}
}

// reportWriter sets the header as the response's header goes out.
type reportWriter struct {
	http.ResponseWriter
	m     *meter
	wrote bool
}

func (w *reportWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		w.Header().Set(Header, Format(w.m.report()))
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *reportWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// ReadFrom keeps the underlying writer's sendfile path (io.Copy finds
// its ReaderFrom), which the wrapper would otherwise hide.
func (w *reportWriter) ReadFrom(r io.Reader) (int64, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return io.Copy(w.ResponseWriter, r)
}

// Flush sends the header (with the report) if nothing was written yet.
func (w *reportWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the underlying writer
// (Flush, Hijack, deadlines).
func (w *reportWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
