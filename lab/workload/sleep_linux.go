package workload

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// preciseThread prepares the calling goroutine's thread for preciseSleep: it
// locks the goroutine to its thread and sets that thread's timer slack to
// 1 ns (by default the kernel may wake a sleeper up to 50 µs late);
// release restores the slack and unlocks the thread.
func preciseThread() (release func()) {
	runtime.LockOSThread()
	old, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	return func() {
		if err == nil && old > 0 {
			unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(old), 0, 0, 0)
		}
		runtime.UnlockOSThread()
	}
}

// preciseSleep sleeps d in the kernel (nanosleep), which wakes within tens of
// microseconds. Go's timers are served by the network poller, whose epoll
// wait has millisecond resolution: on this 2-core machine a time.Timer woke
// 0.6 ms late on average, idle or loaded (2026-11-23), and the generator
// counted that lateness as queue time of every transaction. d must be short
// (the sleep cannot be cancelled).
func preciseSleep(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}
