package throttle_test

import (
	"context"
	"io"
	"time"

	"github.com/sluicedb/sluice/throttle"
)

// A sender calls WaitN before every chunk; the control loop calls SetRate
// every step. The limiter is shared; both sides may run in any goroutines.
func ExampleLimiter() {
	ctx := context.Background()
	lim := throttle.NewLimiter(0, 0) // paused until the controller speaks; auto burst

	go func() { // control loop
		for _, rate := range []float64{50e6, 20e6, 0, 80e6} { // bytes/s from a controller
			lim.SetRate(rate)
			time.Sleep(time.Second)
		}
	}()

	send := func(dst io.Writer, src io.Reader) error { // transfer stream
		buf := make([]byte, 256<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if err := lim.WaitN(ctx, n); err != nil {
					return err
				}
				if _, err := dst.Write(buf[:n]); err != nil {
					return err
				}
			}
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
		}
	}
	_ = send
}

// A mover of fixed-size sub-moves waits after each one (Aqueduct §3.1).
func ExamplePacer() {
	ctx := context.Background()
	pacer := throttle.NewPacer(10e6) // bytes/s; the controller calls SetRate
	const w = 4 << 20                // sub-move size, bytes
	move := func(i int) error { return nil }

	for i := range 3 {
		start := time.Now()
		if err := move(i); err != nil {
			return
		}
		if err := pacer.Wait(ctx, w, time.Since(start)); err != nil {
			return // cancelled
		}
	}
}
