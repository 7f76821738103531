package transfer

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"time"
)

// Owner is the uid/gid that received files and directories are given.
type Owner struct{ UID, GID int }

// ReceiveOptions tune Receive. The zero value writes without fsync and
// leaves ownership to the calling process.
type ReceiveOptions struct {
	// Fsync makes Receive fsync every file before closing it and every
	// directory at the end, so the copy survives a crash of the target host.
	Fsync bool
	// Owner, if set, is given every file and directory created (and the
	// destination itself); this needs root. For PostgreSQL data use
	// pgcluster.OSUserIDs.
	Owner *Owner
	// Progress, if set, is updated live (BytesSent/FilesSent = written and verified).
	Progress *Progress
}

// ReceiveStats describe a finished Receive.
type ReceiveStats struct {
	Files     int64         // regular files written and verified
	Dirs      int64         // directories created
	Bytes     int64         // file data bytes written
	Documents []Document    // end-of-stream documents, also written as files
	Skipped   []string      // files the sender found vanished
	Duration  time.Duration // wall time of Receive
}

// Receive reads a transfer stream from r and writes it under dest, which is
// created (mode 0700) if missing and must otherwise be empty. Every file's
// length and CRC-32C are checked against its trailer and the stream's totals
// against the end frame; documents are written as files, byte for byte.
// Modes are taken from the stream (permission bits only).
//
// Errors name the file concerned and wrap ErrCorrupt, ErrChecksum,
// ErrUnsafePath or ErrAborted where they apply. On error dest holds a partial
// copy that the caller must discard. If r has SetReadDeadline (a net.Conn),
// cancelling ctx interrupts a blocked read.
func Receive(ctx context.Context, r io.Reader, dest string, opts ReceiveOptions) (ReceiveStats, error) {
	start := time.Now()
	if err := prepareDest(dest, opts.Owner); err != nil {
		return ReceiveStats{}, err
	}
	var interrupt func()
	if dl, ok := r.(interface{ SetReadDeadline(time.Time) error }); ok {
		interrupt = func() { dl.SetReadDeadline(time.Unix(1, 0)) }
		stop := context.AfterFunc(ctx, interrupt)
		defer func() {
			stop()
			dl.SetReadDeadline(time.Time{})
		}()
	}
	s := &diskSink{root: dest, owner: opts.Owner, fsync: opts.Fsync}
	st, err := receive(ctx, r, s, opts.Progress, interrupt)
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	st.Duration = time.Since(start)
	return st, err
}

func prepareDest(dest string, owner *Owner) error {
	if err := os.MkdirAll(dest, 0o700); err != nil {
		return fmt.Errorf("transfer: receive: %w", err)
	}
	des, err := os.ReadDir(dest)
	if err != nil {
		return fmt.Errorf("transfer: receive: %w", err)
	}
	if len(des) > 0 {
		return fmt.Errorf("transfer: receive: destination %s is not empty", dest)
	}
	if err := os.Chmod(dest, 0o700); err != nil {
		return fmt.Errorf("transfer: receive: %w", err)
	}
	if owner != nil {
		if err := os.Chown(dest, owner.UID, owner.GID); err != nil {
			return fmt.Errorf("transfer: receive: %w", err)
		}
	}
	return nil
}

// sink is where a received stream lands; diskSink writes a directory tree,
// tests and the fuzzer use memory.
//
// prepare may run on other goroutines concurrently with every method but
// finish; the other methods are called by one goroutine at a time.
type sink interface {
	mkdir(p string, mode fs.FileMode) error
	create(p string, mode fs.FileMode) (fileSink, error)
	// prepare creates the empty file p exclusively (mode and owner set), for
	// openPrepared or discard to take later.
	prepare(p string, mode fs.FileMode) error
	// openPrepared opens a file made by prepare for writing.
	openPrepared(p string) (fileSink, error)
	// discard removes a file made by prepare whose data never came.
	discard(p string) error
	document(p string, data []byte) error
	finish() error
}

type fileSink interface {
	Write(b []byte) (int, error)
	Close() error
}

// parsed is one frame handed from the parsing goroutine to the applying one.
// A frame's data belongs to the receiver of the frame (it is not reused by
// the decoder); chunk payload buffers go back through the free list.
//
// The parser also checksums the data, while it is still in its CPU's cache
// from the socket copy, which leaves the applying goroutine — the slowest
// stage, as it writes the files — only the writing: sum is the CRC-32C of
// the data of all chunks since the last 'F' frame, this one included.
type parsed struct {
	f   frame
	sum uint32
	err error
}

// receiveQueue is how many parsed frames may wait to be applied: the
// network is read while the previous chunks are written to disk. It bounds
// the memory of a receive to about receiveQueue+2 chunk payloads.
const receiveQueue = 8

// errStopped ends a parse whose consumer has gone.
var errStopped = errors.New("transfer: receive: stopped")

// parse decodes frames from dec into out until the end frame, an error, or
// stop is closed. Chunk payloads live in a fixed set of receiveQueue+2
// buffers that the consumer hands back through free (which must have room
// for all of them): once all are out, parse waits for one to come back, so
// a receive touches no new memory after its first few chunks.
func parse(dec *decoder, out chan<- parsed, free <-chan []byte, stop <-chan struct{}) {
	defer close(out)
	const maxBufs = receiveQueue + 2
	bufs := 0 // chunk buffers in circulation: queued, being written, or in free
	dec.alloc = func(n int) ([]byte, error) {
		var b []byte
		select {
		case b = <-free:
		default:
			if bufs < maxBufs {
				bufs++
			} else {
				select {
				case b = <-free:
				case <-stop:
					return nil, errStopped
				}
			}
		}
		if cap(b) < n {
			b = make([]byte, n)
		}
		return b[:n], nil
	}
	var sum uint32
	for {
		f, err := dec.next()
		if f.data != nil && f.typ != frameChunk {
			bufs-- // a document keeps its buffer
		}
		switch {
		case err != nil:
		case f.typ == frameFile:
			sum = 0
		case f.typ == frameChunk:
			sum = crc32.Update(sum, castagnoli, f.data)
		}
		select {
		case out <- parsed{f, sum, err}:
		case <-stop:
			return
		}
		if err != nil || f.typ == frameEnd || f.typ == frameAbort {
			return
		}
	}
}

// receive runs the receiver's state machine over the frames of r. Frames
// are decoded by a second goroutine so that reading the network overlaps
// writing the disk. On error it calls interrupt (if set) to unblock that
// goroutine's read and waits for it; without interrupt the goroutine may
// stay blocked in r.Read until r returns (the caller closes r).
func receive(ctx context.Context, r io.Reader, s sink, prog *Progress, interrupt func()) (st ReceiveStats, err error) {
	if prog == nil {
		prog = new(Progress)
	}
	dec := newDecoder(r)
	if err := dec.readHeader(); err != nil {
		return st, fmt.Errorf("transfer: receive: %w", err)
	}
	frames := make(chan parsed, receiveQueue)
	free := make(chan []byte, receiveQueue+2)
	stop := make(chan struct{})
	parseDone := make(chan struct{})
	go func() {
		defer close(parseDone)
		parse(dec, frames, free, stop)
	}()
	defer func() {
		close(stop)
		if err != nil && interrupt != nil {
			interrupt()
			<-parseDone
		}
	}()
	rc := &receiver{s: s, prog: prog, free: free, seen: map[string]bool{}, listed: map[string]fs.FileMode{}, pre: newPreparer(s)}
	defer rc.pre.close()
	defer func() {
		if err != nil && rc.cur != nil {
			rc.cur.Close()
		}
	}()
	for {
		var p parsed
		var ok bool
		select {
		case p, ok = <-frames:
		case <-ctx.Done():
			return rc.st, ctx.Err()
		}
		if !ok {
			return rc.st, rc.corrupt("frame parser ended without end frame")
		}
		if p.err != nil {
			err := p.err
			if rc.cur != nil {
				err = fmt.Errorf("in file %s: %w", rc.curPath, err)
			}
			return rc.st, fmt.Errorf("transfer: receive: %w", err)
		}
		if end, err := rc.frame(p); err != nil || end {
			return rc.st, err
		}
	}
}

// receiver is the state of receive's writing stage between frames.
type receiver struct {
	s      sink
	prog   *Progress
	free   chan<- []byte // chunk buffers back to the parser
	st     ReceiveStats
	seen   map[string]bool        // every path claimed so far
	listed map[string]fs.FileMode // files announced ('L') whose 'F' or 'S' has not come, with their modes
	pre    *preparer              // creates the listed files meanwhile

	cur     fileSink // the file being written; nil between files
	curPath string
	curCRC  uint32 // of cur's data so far, from the parser
	curLen  uint64
}

func (rc *receiver) corrupt(format string, args ...any) error {
	return fmt.Errorf("transfer: receive: %w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// claim records that the stream names path p (a what) once.
func (rc *receiver) claim(what, p string) error {
	if err := checkPath(p); err != nil {
		return fmt.Errorf("transfer: receive: %s: %w", what, err)
	}
	if rc.seen[p] {
		return fmt.Errorf("transfer: receive: %w: %s %s appears twice", ErrCorrupt, what, p)
	}
	rc.seen[p] = true
	return nil
}

// frame handles one frame; end reports the stream's end frame, received
// whole.
func (rc *receiver) frame(p parsed) (end bool, err error) {
	f := p.f
	if rc.cur != nil && f.typ != frameChunk && f.typ != frameTrailer && f.typ != frameAbort {
		return false, rc.corrupt("frame %q inside file %s", f.typ, rc.curPath)
	}
	switch f.typ {
	case frameDir:
		if err := rc.claim("directory", f.path); err != nil {
			return false, err
		}
		if err := rc.s.mkdir(f.path, fs.FileMode(f.mode).Perm()); err != nil {
			return false, err
		}
		rc.st.Dirs++
	case frameListed:
		if err := rc.claim("file", f.path); err != nil {
			return false, err
		}
		rc.listed[f.path] = fs.FileMode(f.mode).Perm()
		rc.pre.announce(f.path, fs.FileMode(f.mode).Perm())
	case frameFile:
		return false, rc.file(f)
	case frameChunk:
		return false, rc.chunk(f, p.sum)
	case frameTrailer:
		return false, rc.trailer(f)
	case frameSkipped:
		return false, rc.skipped(f)
	case frameDocument:
		if err := rc.claim("document", f.path); err != nil {
			return false, err
		}
		if crc32.Checksum(f.data, castagnoli) != f.crc {
			return false, fmt.Errorf("transfer: receive: document %s: %w", f.path, ErrChecksum)
		}
		data := f.data // owned: the parser does not reuse it
		if err := rc.s.document(f.path, data); err != nil {
			return false, err
		}
		rc.st.Documents = append(rc.st.Documents, Document{Name: f.path, Data: data})
	case frameAbort:
		where := ""
		if rc.cur != nil {
			where = " during file " + rc.curPath
		}
		return false, fmt.Errorf("transfer: receive: %w%s: %s", ErrAborted, where, f.path)
	case frameEnd:
		return true, rc.end(f)
	}
	return false, nil
}

// file opens the file an 'F' frame starts: created ahead when it was
// listed, else now.
func (rc *receiver) file(f frame) error {
	mode := fs.FileMode(f.mode).Perm()
	var err error
	if lm, ok := rc.listed[f.path]; ok {
		delete(rc.listed, f.path)
		if lm != mode {
			return rc.corrupt("file %s: mode %v differs from its listing's %v", f.path, mode, lm)
		}
		if err := rc.pre.await(f.path); err != nil {
			return err
		}
		if rc.cur, err = rc.s.openPrepared(f.path); err != nil {
			return err
		}
	} else {
		if err := rc.claim("file", f.path); err != nil {
			return err
		}
		if rc.cur, err = rc.s.create(f.path, mode); err != nil {
			return err
		}
	}
	rc.curPath, rc.curCRC, rc.curLen = f.path, 0, 0
	return nil
}

// chunk writes a data frame into the current file and gives its buffer
// back to the parser; sum is the file's checksum so far.
func (rc *receiver) chunk(f frame, sum uint32) error {
	if rc.cur == nil {
		return rc.corrupt("data chunk outside a file")
	}
	rc.curCRC = sum
	if _, err := rc.cur.Write(f.data); err != nil {
		return fmt.Errorf("transfer: receive: write %s: %w", rc.curPath, err)
	}
	rc.curLen += uint64(len(f.data))
	rc.prog.BytesSent.Add(int64(len(f.data)))
	select {
	case rc.free <- f.data[:cap(f.data)]:
	default: // cannot happen: free has room for every buffer
	}
	return nil
}

// trailer checks and closes the current file.
func (rc *receiver) trailer(f frame) error {
	if rc.cur == nil {
		return rc.corrupt("file trailer outside a file")
	}
	if f.size != rc.curLen {
		return rc.corrupt("file %s: trailer says %d bytes, received %d", rc.curPath, f.size, rc.curLen)
	}
	if f.crc != rc.curCRC {
		return fmt.Errorf("transfer: receive: file %s: %w (sent crc32c %08x, received %08x)", rc.curPath, ErrChecksum, f.crc, rc.curCRC)
	}
	err := rc.cur.Close()
	rc.cur = nil
	if err != nil {
		return fmt.Errorf("transfer: receive: close %s: %w", rc.curPath, err)
	}
	rc.st.Files++
	rc.st.Bytes += int64(rc.curLen)
	rc.prog.FilesSent.Add(1)
	return nil
}

// skipped records a file the sender could not read; one created ahead is
// removed.
func (rc *receiver) skipped(f frame) error {
	if err := checkPath(f.path); err != nil {
		return fmt.Errorf("transfer: receive: skipped file: %w", err)
	}
	if _, ok := rc.listed[f.path]; ok {
		delete(rc.listed, f.path)
		if err := rc.pre.await(f.path); err != nil {
			return err
		}
		if err := rc.s.discard(f.path); err != nil {
			return err
		}
	}
	rc.st.Skipped = append(rc.st.Skipped, f.path)
	return nil
}

// end checks the end frame's totals against what arrived and finishes the
// tree.
func (rc *receiver) end(f frame) error {
	if len(rc.listed) > 0 {
		left := slices.Sorted(maps.Keys(rc.listed))
		return rc.corrupt("file %s was listed but never sent (%d such files)", left[0], len(left))
	}
	st := rc.st
	want := totals{Files: uint64(st.Files), Dirs: uint64(st.Dirs), Bytes: uint64(st.Bytes), Documents: uint64(len(st.Documents)), Skipped: uint64(len(st.Skipped))}
	if f.totals != want {
		return rc.corrupt("end frame totals %+v, received %+v", f.totals, want)
	}
	return rc.s.finish()
}
