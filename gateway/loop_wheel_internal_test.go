//go:build linux

package gateway

import (
	"testing"
	"time"
)

// The timer wheel fires each connection's timer once, never early, at
// most a tick late; a timer moved or cancelled does not fire; timers
// further out than one turn of the wheel wait for their turn.
func TestWheel(t *testing.T) {
	var w wheel
	t0 := time.Unix(1000, 0)
	w.init(t0)
	conns := make([]*lconn, 5)
	for i := range conns {
		conns[i] = &lconn{}
	}
	w.arm(conns[0], tmIdle, t0.Add(50*time.Millisecond))
	w.arm(conns[1], tmHead, t0.Add(30*time.Second)) // past one turn (10.24s)
	w.arm(conns[2], tmSend, t0.Add(50*time.Millisecond))
	w.disarm(conns[2])
	w.arm(conns[3], tmSend, t0.Add(20*time.Millisecond))
	w.arm(conns[3], tmRespHead, t0.Add(200*time.Millisecond)) // moved later
	w.arm(conns[4], tmBody, t0.Add(50*time.Millisecond))
	fired := map[*lconn]uint8{}
	fire := func(c *lconn, kind uint8) {
		if _, again := fired[c]; again {
			t.Fatalf("a timer fired twice")
		}
		fired[c] = kind
		if c == conns[4] {
			w.arm(conns[4], tmIdle, t0.Add(time.Hour)) // re-armed from its own firing
		}
	}
	if got := w.timeout(t0); got <= 0 || got > 60 {
		t.Fatalf("first timeout %dms, want the earliest timer's (~50ms)", got)
	}
	w.expire(t0.Add(40*time.Millisecond), fire)
	if len(fired) != 0 {
		t.Fatalf("fired early: %v", fired)
	}
	w.expire(t0.Add(70*time.Millisecond), fire)
	if fired[conns[0]] != tmIdle || fired[conns[4]] != tmBody || len(fired) != 2 {
		t.Fatalf("at 70ms fired %v, want conns 0 and 4", fired)
	}
	w.expire(t0.Add(20*time.Second), fire)
	if fired[conns[3]] != tmRespHead || len(fired) != 3 {
		t.Fatalf("at 20s fired %d timers, want the moved one too", len(fired))
	}
	w.expire(t0.Add(31*time.Second), fire)
	if fired[conns[1]] != tmHead || len(fired) != 4 {
		t.Fatalf("at 31s: %d fired, want the 30s timer too", len(fired))
	}
	if w.n != 1 || conns[4].tkind != tmIdle {
		t.Fatalf("%d timers left, want the re-armed one", w.n)
	}
	w.disarm(conns[4])
	if w.n != 0 || w.timeout(t0) != -1 {
		t.Fatalf("no timer left: n=%d timeout=%d", w.n, w.timeout(t0))
	}
}
