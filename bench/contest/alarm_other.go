//go:build !linux

package main

import "time"

// newAlarm, off Linux: a runtime timer drives the sleeper, with the
// lateness alarm is there to avoid.
func newAlarm() (*alarm, error) {
	kick := make(chan struct{}, 1)
	a := &alarm{wake: func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}}
	go func() {
		t := time.NewTimer(time.Hour)
		for {
			d := time.Hour
			switch next := a.fire(time.Now().UnixNano()); {
			case next < 0:
				return
			case next > 0:
				d = time.Until(time.Unix(0, next))
			}
			t.Reset(d)
			select {
			case <-t.C:
			case <-kick:
			}
		}
	}()
	return a, nil
}
