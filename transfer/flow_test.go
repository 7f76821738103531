package transfer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// waitFor polls cond; the deadline only guards against a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPauseFillsBufferToCapThenResumes pauses the sender (rate 0): the reader
// fills the read-ahead buffer to its cap and stops; resuming completes the copy.
func TestPauseFillsBufferToCapThenResumes(t *testing.T) {
	const chunk = 64 << 10
	const capBytes = 4 * chunk
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "f"), randBytes(5, 64*chunk), 0o600)
	entries, err := Walk(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	send := newGate(false)
	prog := new(Progress)
	dest, wait := startRoundTrip(t, context.Background(), root, entries, SendOptions{ChunkSize: chunk, ReadAhead: capBytes, Limiter: send, Progress: prog}, ReceiveOptions{})
	defer send.setOpen(true)
	waitFor(t, "buffer to fill", func() bool { return prog.BytesRead.Load() == capBytes })
	time.Sleep(50 * time.Millisecond) // would the reader overrun the cap?
	if p := prog.Snapshot(); p.BytesRead != capBytes || p.BytesSent != 0 || p.Buffered != capBytes {
		t.Fatalf("while paused: %+v; want exactly %d bytes read and buffered, none sent", p, capBytes)
	}
	send.setOpen(true)
	res := wait()
	if res.serr != nil || res.rerr != nil {
		t.Fatalf("send: %v, receive: %v", res.serr, res.rerr)
	}
	sameTree(t, root, dest)
	if res.send.BufferHighWater != capBytes {
		t.Fatalf("buffer high water %d, want the cap %d", res.send.BufferHighWater, capBytes)
	}
}

// TestPrefetchPauseStopsReading pauses the reader: nothing is read, directory
// frames still flow; resuming completes the copy.
func TestPrefetchPauseStopsReading(t *testing.T) {
	root := oddTree(t)
	entries, err := Walk(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	pre := newGate(false)
	prog := new(Progress)
	dest, wait := startRoundTrip(t, context.Background(), root, entries, SendOptions{Prefetch: pre, Progress: prog}, ReceiveOptions{})
	defer pre.setOpen(true)
	waitFor(t, "reader to block on prefetch", func() bool { return pre.calls.Load() > 0 })
	if p := prog.Snapshot(); p.BytesRead != 0 {
		t.Fatalf("read %d bytes while prefetch was paused", p.BytesRead)
	}
	pre.setOpen(true)
	res := wait()
	if res.serr != nil || res.rerr != nil {
		t.Fatalf("send: %v, receive: %v", res.serr, res.rerr)
	}
	sameTree(t, root, dest)
}

func TestCancelWhilePaused(t *testing.T) {
	root := oddTree(t)
	entries, err := Walk(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	send := newGate(false)
	go func() {
		for send.calls.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, res := roundTrip(t, ctx, root, entries, SendOptions{Limiter: send}, ReceiveOptions{})
	if !errors.Is(res.serr, context.Canceled) {
		t.Fatalf("Send = %v, want context.Canceled", res.serr)
	}
	if res.rerr == nil {
		t.Fatal("Receive succeeded on a cancelled stream")
	}
}

func TestReceiveCancelInterruptsRead(t *testing.T) {
	c, s := tcpPair(t)
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := Receive(ctx, s, filepath.Join(t.TempDir(), "d"), ReceiveOptions{})
		errc <- err
	}()
	c.Write(appendHeader(nil)) // a valid start, then silence
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive = %v, want context.Canceled", err)
	}
}

func TestFinishErrorAbortsStream(t *testing.T) {
	root := oddTree(t)
	entries, err := Walk(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("pg_backup_stop failed")
	_, res := roundTrip(t, context.Background(), root, entries, SendOptions{Finish: func(context.Context) ([]Document, error) { return nil, boom }}, ReceiveOptions{})
	if !errors.Is(res.serr, boom) {
		t.Fatalf("Send = %v, want %v", res.serr, boom)
	}
	if !errors.Is(res.rerr, ErrAborted) || !strings.Contains(res.rerr.Error(), boom.Error()) {
		t.Fatalf("Receive = %v, want ErrAborted with the sender's reason", res.rerr)
	}
}

func TestTruncatedStreamIsAnError(t *testing.T) {
	root := oddTree(t)
	entries, err := Walk(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := Send(context.Background(), &buf, root, entries, SendOptions{}); err != nil {
		t.Fatal(err)
	}
	full := buf.Bytes()
	for _, cut := range []int{0, 5, 12, len(full) / 2, len(full) - 1} {
		_, err := Receive(context.Background(), bytes.NewReader(full[:cut]), filepath.Join(t.TempDir(), "d"), ReceiveOptions{})
		if !errors.Is(err, ErrCorrupt) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut at %d of %d: Receive = %v, want ErrCorrupt (unexpected EOF)", cut, len(full), err)
		}
	}
	// And the whole stream is fine.
	if _, err := Receive(context.Background(), bytes.NewReader(full), filepath.Join(t.TempDir(), "d"), ReceiveOptions{}); err != nil {
		t.Fatal(err)
	}
}

// maxLimiter records the largest WaitN request.
type maxLimiter struct{ max, total atomic.Int64 }

func (m *maxLimiter) WaitN(_ context.Context, n int) error {
	m.total.Add(int64(n))
	for {
		c := m.max.Load()
		if int64(n) <= c || m.max.CompareAndSwap(c, int64(n)) {
			return nil
		}
	}
}

// TestLimiterRequestsBounded: every byte on the wire is asked of the send
// limiter, every byte read of the prefetch limiter, never more than MaxWait at once.
func TestLimiterRequestsBounded(t *testing.T) {
	root := oddTree(t)
	entries, err := Walk(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	var send, pre maxLimiter
	_, res := roundTrip(t, context.Background(), root, entries, SendOptions{Limiter: &send, Prefetch: &pre}, ReceiveOptions{})
	if res.serr != nil || res.rerr != nil {
		t.Fatalf("send: %v, receive: %v", res.serr, res.rerr)
	}
	if send.max.Load() > MaxWait || pre.max.Load() > MaxWait {
		t.Fatalf("largest WaitN: send %d, prefetch %d; want ≤ %d", send.max.Load(), pre.max.Load(), MaxWait)
	}
	if send.total.Load() != res.send.WireBytes || pre.total.Load() != res.send.Bytes {
		t.Fatalf("limited: send %d of %d wire bytes, prefetch %d of %d file bytes", send.total.Load(), res.send.WireBytes, pre.total.Load(), res.send.Bytes)
	}
}

// burstLimiter is a maxLimiter that reports a burst, as *throttle.Limiter does.
type burstLimiter struct {
	maxLimiter
	burst int
}

func (b *burstLimiter) Burst() int { return b.burst }

// TestLimiterWholeChunks: a limiter that reports a burst of at least a chunk
// is asked for whole chunks (one wait each), still for every byte, and
// never for more than its burst.
func TestLimiterWholeChunks(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "big"), randBytes(5, 3*DefaultChunkSize+17), 0o600)
	entries, err := Walk(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	burst := DefaultChunkSize + 1<<10 // a chunk and its frame header
	send, pre := &burstLimiter{burst: burst}, &burstLimiter{burst: burst}
	_, res := roundTrip(t, context.Background(), root, entries, SendOptions{Limiter: send, Prefetch: pre}, ReceiveOptions{})
	if res.serr != nil || res.rerr != nil {
		t.Fatalf("send: %v, receive: %v", res.serr, res.rerr)
	}
	if send.max.Load() <= MaxWait || pre.max.Load() != int64(DefaultChunkSize) {
		t.Fatalf("largest WaitN: send %d, prefetch %d; want whole chunks (%d)", send.max.Load(), pre.max.Load(), DefaultChunkSize)
	}
	if send.max.Load() > int64(burst) {
		t.Fatalf("largest send WaitN %d is beyond the burst %d", send.max.Load(), burst)
	}
	if send.total.Load() != res.send.WireBytes || pre.total.Load() != res.send.Bytes {
		t.Fatalf("limited: send %d of %d wire bytes, prefetch %d of %d file bytes", send.total.Load(), res.send.WireBytes, pre.total.Load(), res.send.Bytes)
	}
}
