package main

import (
	"encoding/binary"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// newAlarm starts the sleeper: a locked thread in ppoll on an eventfd
// that a new earliest deadline writes to.
func newAlarm() (*alarm, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	one := binary.NativeEndian.AppendUint64(nil, 1)
	a := &alarm{wake: func() { _, _ = unix.Write(efd, one) }}
	go func() {
		runtime.LockOSThread()
		// The kernel may otherwise end a sleep up to 50 µs late to
		// batch wake-ups.
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
		// First on a CPU when due, ahead of the contender and the load
		// generator (needs CAP_SYS_NICE; without it, the default).
		_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), -20)
		fds := []unix.PollFd{{Fd: int32(efd), Events: unix.POLLIN}}
		buf := make([]byte, 8)
		defer unix.Close(efd)
		for {
			next := a.fire(time.Now().UnixNano())
			if next < 0 {
				return
			}
			var ts *unix.Timespec
			if next != 0 {
				t := unix.NsecToTimespec(max(next-time.Now().UnixNano(), 0))
				ts = &t
			}
			fds[0].Revents = 0
			if n, _ := unix.Ppoll(fds, ts, nil); n > 0 {
				_, _ = unix.Read(efd, buf)
			}
		}
	}()
	return a, nil
}
