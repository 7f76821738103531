package transfer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

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
