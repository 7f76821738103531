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
	"path/filepath"
	"slices"
	"sync"
	"syscall"
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
	seen := make(map[string]bool)
	// listed holds files announced by 'L' frames whose 'F' (or 'S') has not
	// come yet, with their modes; pre creates them meanwhile.
	listed := make(map[string]fs.FileMode)
	pre := newPreparer(s)
	defer pre.close()
	var (
		cur     fileSink
		curPath string
		curCRC  uint32 // of the data of cur so far, from the parser
		curLen  uint64
	)
	fail := func(err error) (ReceiveStats, error) {
		if cur != nil {
			cur.Close()
		}
		return st, err
	}
	corrupt := func(format string, args ...any) (ReceiveStats, error) {
		return fail(fmt.Errorf("transfer: receive: %w: "+format, append([]any{ErrCorrupt}, args...)...))
	}
	claim := func(what, p string) error {
		if err := checkPath(p); err != nil {
			return fmt.Errorf("transfer: receive: %s: %w", what, err)
		}
		if seen[p] {
			return fmt.Errorf("transfer: receive: %w: %s %s appears twice", ErrCorrupt, what, p)
		}
		seen[p] = true
		return nil
	}
	for {
		var p parsed
		var ok bool
		select {
		case p, ok = <-frames:
		case <-ctx.Done():
			return fail(ctx.Err())
		}
		if !ok {
			return corrupt("frame parser ended without end frame")
		}
		f, err := p.f, p.err
		if err != nil {
			if cur != nil {
				err = fmt.Errorf("in file %s: %w", curPath, err)
			}
			return fail(fmt.Errorf("transfer: receive: %w", err))
		}
		if cur != nil && f.typ != frameChunk && f.typ != frameTrailer && f.typ != frameAbort {
			return corrupt("frame %q inside file %s", f.typ, curPath)
		}
		switch f.typ {
		case frameDir:
			if err := claim("directory", f.path); err != nil {
				return fail(err)
			}
			if err := s.mkdir(f.path, fs.FileMode(f.mode).Perm()); err != nil {
				return fail(err)
			}
			st.Dirs++
		case frameListed:
			if err := claim("file", f.path); err != nil {
				return fail(err)
			}
			listed[f.path] = fs.FileMode(f.mode).Perm()
			pre.announce(f.path, fs.FileMode(f.mode).Perm())
		case frameFile:
			mode := fs.FileMode(f.mode).Perm()
			if lm, ok := listed[f.path]; ok {
				delete(listed, f.path)
				if lm != mode {
					return corrupt("file %s: mode %v differs from its listing's %v", f.path, mode, lm)
				}
				if err := pre.await(f.path); err != nil {
					return fail(err)
				}
				if cur, err = s.openPrepared(f.path); err != nil {
					return fail(err)
				}
			} else {
				if err := claim("file", f.path); err != nil {
					return fail(err)
				}
				if cur, err = s.create(f.path, mode); err != nil {
					return fail(err)
				}
			}
			curPath, curCRC, curLen = f.path, 0, 0
		case frameChunk:
			if cur == nil {
				return corrupt("data chunk outside a file")
			}
			curCRC = p.sum
			if _, err := cur.Write(f.data); err != nil {
				return fail(fmt.Errorf("transfer: receive: write %s: %w", curPath, err))
			}
			curLen += uint64(len(f.data))
			prog.BytesSent.Add(int64(len(f.data)))
			select {
			case free <- f.data[:cap(f.data)]:
			default: // cannot happen: free has room for every buffer
			}
		case frameTrailer:
			if cur == nil {
				return corrupt("file trailer outside a file")
			}
			if f.size != curLen {
				return corrupt("file %s: trailer says %d bytes, received %d", curPath, f.size, curLen)
			}
			if f.crc != curCRC {
				return fail(fmt.Errorf("transfer: receive: file %s: %w (sent crc32c %08x, received %08x)", curPath, ErrChecksum, f.crc, curCRC))
			}
			err := cur.Close()
			cur = nil
			if err != nil {
				return fail(fmt.Errorf("transfer: receive: close %s: %w", curPath, err))
			}
			st.Files++
			st.Bytes += int64(curLen)
			prog.FilesSent.Add(1)
		case frameSkipped:
			if err := checkPath(f.path); err != nil {
				return fail(fmt.Errorf("transfer: receive: skipped file: %w", err))
			}
			if _, ok := listed[f.path]; ok {
				delete(listed, f.path)
				if err := pre.await(f.path); err != nil {
					return fail(err)
				}
				if err := s.discard(f.path); err != nil {
					return fail(err)
				}
			}
			st.Skipped = append(st.Skipped, f.path)
		case frameDocument:
			if err := claim("document", f.path); err != nil {
				return fail(err)
			}
			if crc32.Checksum(f.data, castagnoli) != f.crc {
				return fail(fmt.Errorf("transfer: receive: document %s: %w", f.path, ErrChecksum))
			}
			data := f.data // owned: the parser does not reuse it
			if err := s.document(f.path, data); err != nil {
				return fail(err)
			}
			st.Documents = append(st.Documents, Document{Name: f.path, Data: data})
		case frameAbort:
			where := ""
			if cur != nil {
				where = " during file " + curPath
			}
			return fail(fmt.Errorf("transfer: receive: %w%s: %s", ErrAborted, where, f.path))
		case frameEnd:
			if len(listed) > 0 {
				left := slices.Sorted(maps.Keys(listed))
				return corrupt("file %s was listed but never sent (%d such files)", left[0], len(left))
			}
			want := totals{Files: uint64(st.Files), Dirs: uint64(st.Dirs), Bytes: uint64(st.Bytes), Documents: uint64(len(st.Documents)), Skipped: uint64(len(st.Skipped))}
			if f.totals != want {
				return corrupt("end frame totals %+v, received %+v", f.totals, want)
			}
			if err := s.finish(); err != nil {
				return fail(err)
			}
			return st, nil
		}
	}
}

// diskSink writes the received tree under root.
type diskSink struct {
	root  string
	owner *Owner
	fsync bool
	mu    sync.Mutex // guards dirs (prepare runs on other goroutines)
	dirs  []string   // created directories, fsynced at finish
}

func (d *diskSink) addDir(full string) {
	d.mu.Lock()
	d.dirs = append(d.dirs, full)
	d.mu.Unlock()
}

func (d *diskSink) full(p string) string { return filepath.Join(d.root, filepath.FromSlash(p)) }

// parents creates the missing parents of full (mode 0700, owned by owner).
func (d *diskSink) parents(full string) error {
	dir := filepath.Dir(full)
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := d.parents(dir); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("transfer: receive: %w", err)
	}
	d.addDir(dir)
	return d.chown(dir)
}

func (d *diskSink) chown(full string) error {
	if d.owner == nil {
		return nil
	}
	if err := os.Lchown(full, d.owner.UID, d.owner.GID); err != nil {
		return fmt.Errorf("transfer: receive: %w", err)
	}
	return nil
}

func (d *diskSink) mkdir(p string, mode fs.FileMode) error {
	full := d.full(p)
	err := os.Mkdir(full, mode)
	if errors.Is(err, fs.ErrNotExist) {
		if err = d.parents(full); err == nil {
			err = os.Mkdir(full, mode)
		}
	}
	if errors.Is(err, fs.ErrExist) {
		if info, serr := os.Lstat(full); serr == nil && info.IsDir() {
			err = nil // made earlier as a missing parent
		}
	}
	if err != nil {
		return fmt.Errorf("transfer: receive: directory %s: %w", p, err)
	}
	if err := os.Chmod(full, mode); err != nil { // umask-proof
		return fmt.Errorf("transfer: receive: directory %s: %w", p, err)
	}
	d.addDir(full)
	return d.chown(full)
}

type diskFile struct {
	f       *os.File
	fsync   bool
	off     int64 // bytes written (files are written front to back)
	flushed int64 // bytes handed to writeback
}

// FlushBehind is how many bytes of a received file may be written before
// the receiver starts their writeback (sync_file_range(SYNC_FILE_RANGE_WRITE),
// which does not wait for it), as PostgreSQL's backend_flush_after does for
// its own writes. Without it a whole snapshot sits dirty in the page cache
// until something syncs it — the standby's first start fsyncs its data
// directory — and then goes to the disk in one burst (on the testbed's
// shared disk the source's clients then saw 9–13 ms seconds in catch-up
// against 6–9 ms during the copy; how much of that the burst caused was
// not measured apart), and a memory cgroup full of dirty pages (510 MB on
// a receiving testbed server) stalls its processes in reclaim. Spread
// out, the writes follow the migration's pace.
const FlushBehind = 8 << 20

func (f *diskFile) Write(b []byte) (int, error) {
	n, err := f.f.Write(b)
	f.off += int64(n)
	if f.off-f.flushed >= FlushBehind {
		flushBehind(f.f, f.flushed, f.off-f.flushed)
		f.flushed = f.off
	}
	return n, err
}

func (f *diskFile) Close() error {
	if f.fsync {
		if err := f.f.Sync(); err != nil {
			f.f.Close()
			return err
		}
	}
	return f.f.Close()
}

func (d *diskSink) open(p string, mode fs.FileMode) (*os.File, error) {
	full := d.full(p)
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	f, err := os.OpenFile(full, flags, mode)
	if errors.Is(err, fs.ErrNotExist) {
		if err = d.parents(full); err == nil {
			f, err = os.OpenFile(full, flags, mode)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("transfer: receive: file %s: %w", p, err)
	}
	if err := f.Chmod(mode); err != nil { // umask-proof
		f.Close()
		return nil, fmt.Errorf("transfer: receive: file %s: %w", p, err)
	}
	if d.owner != nil {
		if err := f.Chown(d.owner.UID, d.owner.GID); err != nil {
			f.Close()
			return nil, fmt.Errorf("transfer: receive: file %s: %w", p, err)
		}
	}
	return f, nil
}

func (d *diskSink) create(p string, mode fs.FileMode) (fileSink, error) {
	f, err := d.open(p, mode)
	if err != nil {
		return nil, err
	}
	return &diskFile{f: f, fsync: d.fsync}, nil
}

func (d *diskSink) prepare(p string, mode fs.FileMode) error {
	f, err := d.open(p, mode)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("transfer: receive: file %s: %w", p, err)
	}
	return nil
}

func (d *diskSink) openPrepared(p string) (fileSink, error) {
	f, err := os.OpenFile(d.full(p), os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("transfer: receive: file %s: %w", p, err)
	}
	return &diskFile{f: f, fsync: d.fsync}, nil
}

func (d *diskSink) discard(p string) error {
	if err := os.Remove(d.full(p)); err != nil {
		return fmt.Errorf("transfer: receive: skipped file %s: %w", p, err)
	}
	return nil
}

func (d *diskSink) document(p string, data []byte) error {
	f, err := d.open(p, 0o600)
	if err != nil {
		return err
	}
	df := &diskFile{f: f, fsync: d.fsync}
	if _, err := f.Write(data); err != nil {
		df.Close()
		return fmt.Errorf("transfer: receive: document %s: %w", p, err)
	}
	if err := df.Close(); err != nil {
		return fmt.Errorf("transfer: receive: document %s: %w", p, err)
	}
	return nil
}

func (d *diskSink) finish() error {
	if !d.fsync {
		return nil
	}
	d.mu.Lock()
	dirs := append(d.dirs, d.root)
	d.mu.Unlock()
	for _, dir := range dirs {
		f, err := os.Open(dir)
		if err != nil {
			return fmt.Errorf("transfer: receive: fsync %s: %w", dir, err)
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("transfer: receive: fsync %s: %w", dir, err)
		}
	}
	return nil
}
