//go:build !linux

package workload

import "time"

func preciseThread() (release func()) { return func() {} }

func preciseSleep(d time.Duration) { time.Sleep(d) }
