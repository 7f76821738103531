package snapshot

import (
	"context"
	"errors"
	"io"
)

// Writer is the target side of a snapshot as an io.WriteCloser, for
// transports that push the stream (an HTTP handler copying a request body,
// a migration Target's OpenSnapshot): bytes written to it are received into
// the destination directory by Receive running in the background.
//
// Close ends the stream and waits for the receiver; it returns nil only if
// a complete, verified snapshot arrived. A Write after the receiver has
// failed returns the receiver's error. Write and Close must not be called
// concurrently with each other.
type Writer struct {
	pw   *io.PipeWriter
	done chan struct{}
	res  Result
	err  error
}

// errStreamDone is what a Write after the end frame gets.
var errStreamDone = errors.New("snapshot: write after the end of the stream")

// NewWriter starts receiving into destDir (see Receive for its rules) and
// returns the writer to feed the stream into. Cancelling ctx makes the
// receiver stop and later writes fail.
func NewWriter(ctx context.Context, destDir string, opts ReceiveOptions) *Writer {
	pr, pw := io.Pipe()
	w := &Writer{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.res, w.err = Receive(ctx, pr, destDir, opts)
		if w.err != nil {
			pr.CloseWithError(w.err)
		} else {
			pr.CloseWithError(errStreamDone)
		}
	}()
	return w
}

// Write feeds stream bytes to the receiver.
func (w *Writer) Write(b []byte) (int, error) { return w.pw.Write(b) }

// Close ends the stream, waits for the receiver and returns its verdict.
func (w *Writer) Close() error {
	w.pw.Close()
	<-w.done
	return w.err
}

// Result is the receiver's result; valid after Close.
func (w *Writer) Result() Result { return w.res }
