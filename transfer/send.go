package transfer

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Limiter paces a stage: WaitN blocks until n more bytes may pass, or ctx
// ends. *throttle.Limiter satisfies it; its rate may change at any time
// (0 pauses, raising wakes waiters), which is how the control loop steers a
// running transfer. Send asks for a whole chunk at once when the limiter
// reports a burst at least that large (Burst() int, as *throttle.Limiter
// does), and otherwise never more than MaxWait bytes at once, so a limiter
// with a burst of at least MaxWait (e.g. golang.org/x/time/rate) works too.
type Limiter interface {
	WaitN(ctx context.Context, n int) error
}

// MaxWait is the largest n Send passes to a Limiter.WaitN that does not
// report its burst, bytes (64 KiB).
const MaxWait = 64 << 10

// waitN takes n bytes from lim: in one wait when lim's burst covers n (one
// wake-up per chunk: each costs CPU on the paced server), else in steps of at
// most MaxWait.
func waitN(ctx context.Context, lim Limiter, n int) error {
	if b, ok := lim.(interface{ Burst() int }); ok && n <= b.Burst() {
		return lim.WaitN(ctx, n)
	}
	for n > 0 {
		k := min(n, MaxWait)
		if err := lim.WaitN(ctx, k); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// DefaultReadAhead is the default memory cap of the read-ahead buffer, bytes (64 MiB).
const DefaultReadAhead = 64 << 20

// Document is a small named blob sent at the end of the stream and written by
// the receiver as a file at Name (e.g. backup_label), byte for byte.
type Document struct {
	Name string
	Data []byte
}

// SendOptions tune Send. The zero value sends as fast as possible with a
// DefaultReadAhead buffer and DefaultChunkSize chunks.
type SendOptions struct {
	// ReadAhead caps the read-ahead buffer, bytes of file data held in memory
	// between the reader and the sender. Rounded down to whole chunks, at
	// least 2. Default DefaultReadAhead.
	ReadAhead int64
	// ChunkSize is the data per frame, bytes, 1..MaxChunkSize. Default DefaultChunkSize.
	ChunkSize int
	// Prefetch paces the reader (bytes read from disk); nil = unlimited.
	Prefetch Limiter
	// Limiter paces the sender (bytes written to w, framing included); nil = unlimited.
	Limiter Limiter
	// Progress, if set, is updated live.
	Progress *Progress
	// Finish, if set, is called once every entry has been read (while the
	// sender may still be draining the buffer). The documents it returns are
	// sent after the last file; an error aborts the stream. For a hot backup
	// this is where pg_backup_stop runs.
	Finish func(ctx context.Context) ([]Document, error)
}

// SendStats describe a finished Send.
type SendStats struct {
	Files           int64         // regular files sent
	Dirs            int64         // directories sent
	Bytes           int64         // file data bytes sent
	WireBytes       int64         // bytes written to w, framing included
	Documents       int64         // documents sent
	Skipped         []string      // files that vanished before they could be opened
	BufferHighWater int64         // most file data held in the read-ahead buffer, bytes
	Duration        time.Duration // wall time of Send
}

// chunkBuf is one pooled buffer: a chunk frame header followed by up to
// ChunkSize data bytes, read in place so the sender writes it with one call.
type chunkBuf struct{ b []byte }

// item is one frame in the queue from reader to sender: either a pooled chunk
// (buf != nil, frame = buf.b[:chunkHeaderLen+n]) or a small control frame.
type item struct {
	buf   *chunkBuf
	frame []byte
	n     int // file data bytes in the frame
	file  bool
}

// Send streams root's entries (as listed by Walk, parents before children)
// to w: the reader stage reads files into the read-ahead buffer while the
// sender stage drains it through opts.Limiter. Regular files are read up to
// their size at open; vanished files are skipped; see the package comment.
//
// On error Send writes an abort frame when it still can and returns the first
// error; the receiver then fails too. If w has SetWriteDeadline (a net.Conn),
// cancelling ctx also interrupts a blocked write.
func Send(ctx context.Context, w io.Writer, root string, entries []Entry, opts SendOptions) (SendStats, error) {
	start := time.Now()
	chunk := opts.ChunkSize
	if chunk == 0 {
		chunk = DefaultChunkSize
	}
	if chunk < 1 || chunk > MaxChunkSize {
		return SendStats{}, fmt.Errorf("transfer: send: chunk size %d outside 1..%d", chunk, MaxChunkSize)
	}
	ra := opts.ReadAhead
	if ra == 0 {
		ra = DefaultReadAhead
	}
	if ra < 0 {
		return SendStats{}, fmt.Errorf("transfer: send: negative read-ahead %d", ra)
	}
	nbuf := int(ra / int64(chunk))
	if nbuf < 2 {
		nbuf = 2
	}
	prog := opts.Progress
	if prog == nil {
		prog = new(Progress)
	}
	var totalBytes, totalFiles int64
	for _, e := range entries {
		if !e.Dir {
			totalBytes += e.Size
			totalFiles++
		}
	}
	prog.TotalBytes.Store(totalBytes)
	prog.TotalFiles.Store(totalFiles)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if dl, ok := w.(interface{ SetWriteDeadline(time.Time) error }); ok {
		stop := context.AfterFunc(ctx, func() { dl.SetWriteDeadline(time.Unix(1, 0)) })
		defer func() {
			if stop() {
				return
			}
			dl.SetWriteDeadline(time.Time{})
		}()
	}

	r := &reader{
		root:  root,
		chunk: chunk,
		nbuf:  nbuf,
		free:  make(chan *chunkBuf, nbuf),
		q:     make(chan item, nbuf+64),
		opts:  opts,
		prog:  prog,
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(r.q)
		r.err = r.run(ctx, entries)
	}()

	st, err := r.send(ctx, w)
	if err != nil {
		cancel()
	}
	wg.Wait()
	r.release()
	if err == nil && r.err != nil {
		err = r.err
	}
	if err != nil && ctx.Err() == nil {
		// Best effort: tell the receiver why the stream ends here.
		w.Write(appendAbort(nil, err.Error()))
	}
	st.Skipped = r.skipped
	st.BufferHighWater = prog.BufferHighWater.Load()
	st.Duration = time.Since(start)
	return st, err
}

// reader is the reader stage of one Send.
type reader struct {
	root    string
	chunk   int
	nbuf    int
	alloc   int // chunk buffers allocated so far (≤ nbuf)
	free    chan *chunkBuf
	q       chan item
	opts    SendOptions
	prog    *Progress
	skipped []string
	err     error // set before q is closed
	stats   totals
}

func (r *reader) put(ctx context.Context, it item) error {
	select {
	case r.q <- it:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// chunkPools keep chunk buffers between Sends, per chunk size: touching
// fresh memory is the dearest part of filling a read-ahead buffer (page
// faults; measured ~4 ms per MiB on the shared 2-core VM), so an agent that
// moves several tenants, or a benchmark that repeats a copy, pays it once.
var chunkPools sync.Map // int → *sync.Pool of *chunkBuf

func getChunkBuf(chunk int) *chunkBuf {
	if p, ok := chunkPools.Load(chunk); ok {
		if b, ok := p.(*sync.Pool).Get().(*chunkBuf); ok {
			return b
		}
	}
	return &chunkBuf{b: make([]byte, chunkHeaderLen+chunk)}
}

func putChunkBuf(chunk int, b *chunkBuf) {
	p, _ := chunkPools.LoadOrStore(chunk, new(sync.Pool))
	p.(*sync.Pool).Put(b)
}

// release returns every chunk buffer to the pool; call after both stages ended.
func (r *reader) release() {
	for it := range r.q { // left over after an error
		if it.buf != nil {
			r.free <- it.buf
		}
	}
	for {
		select {
		case b := <-r.free:
			putChunkBuf(r.chunk, b)
		default:
			return
		}
	}
}

// getBuf returns a free chunk buffer, allocating lazily up to nbuf and then
// blocking until the sender returns one: this is the memory cap.
func (r *reader) getBuf(ctx context.Context) (*chunkBuf, error) {
	select {
	case b := <-r.free:
		return b, nil
	default:
	}
	if r.alloc < r.nbuf {
		r.alloc++
		return getChunkBuf(r.chunk), nil
	}
	select {
	case b := <-r.free:
		return b, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (r *reader) run(ctx context.Context, entries []Entry) error {
	// Announce every file first (one write), so that the receiver can
	// create them while data flows (see prepare.go).
	var list []byte
	for _, e := range entries {
		if err := checkPath(e.Path); err != nil {
			return fmt.Errorf("transfer: send: %w", err)
		}
		if !e.Dir {
			list = appendListed(list, e.Path, uint32(e.Mode.Perm()))
		}
	}
	if len(list) > 0 {
		if err := r.put(ctx, item{frame: list}); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if err := checkPath(e.Path); err != nil {
			return fmt.Errorf("transfer: send: %w", err)
		}
		if e.Dir {
			r.stats.Dirs++
			if err := r.put(ctx, item{frame: appendDir(nil, e.Path, uint32(e.Mode.Perm()))}); err != nil {
				return err
			}
			continue
		}
		if err := r.readFile(ctx, e); err != nil {
			return err
		}
	}
	var docs []Document
	if r.opts.Finish != nil {
		var err error
		if docs, err = r.opts.Finish(ctx); err != nil {
			return err
		}
	}
	for _, d := range docs {
		if err := checkPath(d.Name); err != nil {
			return fmt.Errorf("transfer: send: document: %w", err)
		}
		if len(d.Data) > MaxDocumentSize {
			return fmt.Errorf("transfer: send: document %s of %d bytes exceeds %d", d.Name, len(d.Data), MaxDocumentSize)
		}
		r.stats.Documents++
		if err := r.put(ctx, item{frame: appendDocument(nil, d.Name, d.Data)}); err != nil {
			return err
		}
	}
	r.stats.Skipped = uint64(len(r.skipped))
	return r.put(ctx, item{frame: appendEnd(nil, r.stats)})
}

// readFile sends one regular file: header, chunks up to its size at open,
// trailer with the length actually read and its CRC-32C.
func (r *reader) readFile(ctx context.Context, e Entry) error {
	full := filepath.Join(r.root, filepath.FromSlash(e.Path))
	f, err := os.Open(full)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			r.skipped = append(r.skipped, e.Path)
			return r.put(ctx, item{frame: appendSkipped(nil, e.Path)})
		}
		return fmt.Errorf("transfer: send: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("transfer: send: stat %s: %w", full, err)
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("transfer: send: %s is not a regular file (%v)", full, info.Mode().Type())
	}
	size := info.Size()
	if err := r.put(ctx, item{frame: appendFile(nil, e.Path, uint32(e.Mode.Perm()), uint64(size))}); err != nil {
		return err
	}
	var crc uint32
	var done int64
	for done < size {
		want := int64(r.chunk)
		if rem := size - done; rem < want {
			want = rem
		}
		if r.opts.Prefetch != nil {
			if err := waitN(ctx, r.opts.Prefetch, int(want)); err != nil {
				return err
			}
		}
		buf, err := r.getBuf(ctx)
		if err != nil {
			return err
		}
		n, err := io.ReadFull(f, buf.b[chunkHeaderLen:chunkHeaderLen+int(want)])
		shrunk := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !shrunk {
			r.free <- buf
			return fmt.Errorf("transfer: send: read %s: %w", full, err)
		}
		if n == 0 {
			r.free <- buf
			break
		}
		data := buf.b[chunkHeaderLen : chunkHeaderLen+n]
		crc = crc32.Update(crc, castagnoli, data)
		putChunkHeader(buf.b, n)
		done += int64(n)
		r.prog.BytesRead.Add(int64(n))
		r.prog.addBuffered(int64(n))
		if err := r.put(ctx, item{buf: buf, frame: buf.b[:chunkHeaderLen+n], n: n}); err != nil {
			return err
		}
		if shrunk {
			break
		}
	}
	r.stats.Files++
	r.stats.Bytes += uint64(done)
	r.prog.FilesRead.Add(1)
	return r.put(ctx, item{frame: appendTrailer(nil, uint64(done), crc), file: true})
}

// send is the sender stage: it drains the queue through the limiter into w.
func (r *reader) send(ctx context.Context, w io.Writer) (SendStats, error) {
	var st SendStats
	hdr := appendHeader(nil)
	if err := r.write(ctx, w, hdr, &st); err != nil {
		return st, err
	}
	for it := range r.q {
		typ := it.frame[0] // read before the buffer goes back to the reader
		err := r.write(ctx, w, it.frame, &st)
		if it.buf != nil {
			r.prog.addBuffered(-int64(it.n))
			if err == nil {
				st.Bytes += int64(it.n)
				r.prog.BytesSent.Add(int64(it.n))
			}
			r.free <- it.buf
		}
		if err != nil {
			return st, err
		}
		if it.file {
			st.Files++
			r.prog.FilesSent.Add(1)
		}
		switch typ {
		case frameDir:
			st.Dirs++
		case frameDocument:
			st.Documents++
		}
	}
	return st, nil
}

func (r *reader) write(ctx context.Context, w io.Writer, b []byte, st *SendStats) error {
	if r.opts.Limiter != nil {
		if err := waitN(ctx, r.opts.Limiter, len(b)); err != nil {
			return err
		}
	}
	n, err := w.Write(b)
	st.WireBytes += int64(n)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("transfer: send: write: %w", err)
	}
	return nil
}

// Abort writes a whole stream that says only that the sender failed and why:
// for a sender that fails before Send could start (the receiver then reports
// ErrAborted with the reason instead of a torn stream).
func Abort(w io.Writer, reason error) error {
	if _, err := w.Write(appendAbort(appendHeader(nil), reason.Error())); err != nil {
		return fmt.Errorf("transfer: abort: %w", err)
	}
	return nil
}
