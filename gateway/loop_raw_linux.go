package gateway

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The loop's sockets and epoll polls never block (O_NONBLOCK, timeout 0),
// so their calls go to the kernel as raw syscalls, without the runtime's
// entersyscall/exitsyscall around them. Each of those costs little, but a
// write on loopback runs the receiver's TCP stack inline and can outlast
// sysmon's 20 µs tick; the runtime then hands the loop's P to another
// thread (a wake-up and a context switch) although the loop was never
// going to block. A raw call cannot be preempted, which is harmless for
// calls that return at once.

var zeroByte byte

func bufPtr(p []byte) unsafe.Pointer {
	if len(p) == 0 {
		return unsafe.Pointer(&zeroByte)
	}
	return unsafe.Pointer(&p[0])
}

// rawRead is unix.Read for a non-blocking socket: n is -1 with an error.
// It is recvfrom rather than read: the socket call skips the file layer
// that read goes through for any fd (the position lock, the access
// check, the fsnotify hook), as nginx's recv does.
func rawRead(fd int, p []byte) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(bufPtr(p)), uintptr(len(p)), 0, 0, 0)
	if e != 0 {
		return -1, errno(e)
	}
	return int(r), nil
}

// rawWrite is unix.Write for a non-blocking socket: n is -1 with an
// error. It is sendto, for the reason rawRead is recvfrom, with
// MSG_NOSIGNAL: a peer gone makes EPIPE without raising SIGPIPE.
func rawWrite(fd int, p []byte) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(bufPtr(p)), uintptr(len(p)), unix.MSG_NOSIGNAL, 0, 0)
	if e != 0 {
		return -1, errno(e)
	}
	return int(r), nil
}

// rawPoll is unix.EpollWait with a timeout of 0: it never sleeps.
func rawPoll(ep int, events []unix.EpollEvent) (int, error) {
	var p unsafe.Pointer
	if len(events) > 0 {
		p = unsafe.Pointer(&events[0])
	}
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(p), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return -1, errno(e)
	}
	return int(r), nil
}

// errno boxes e as unix.Read does: the common values without allocating.
func errno(e syscall.Errno) error {
	switch e {
	case unix.EAGAIN:
		return unix.EAGAIN
	case unix.EINTR:
		return unix.EINTR
	}
	return e
}
