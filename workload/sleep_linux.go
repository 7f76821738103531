package workload

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// preciseThread prepares the calling goroutine's thread for preciseSleep: it
// locks the goroutine to its thread and sets that thread's timer slack to
// 1 ns (the kernel's default, 50 µs, is added to every sleep).
func preciseThread() (release func()) {
	runtime.LockOSThread()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	return runtime.UnlockOSThread
}

// preciseSleep sleeps d in the kernel (nanosleep), which wakes within tens of
// microseconds. Go's timers are served by the network poller, whose epoll
// wait has millisecond resolution: on this 2-core machine a time.Timer woke
// 0.6 ms late on average, idle or loaded (2026-11-23), and the generator
// counted that lateness as queue time of every transaction. d must be short
// (the sleep cannot be cancelled).
func preciseSleep(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	for d > 0 && unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}
