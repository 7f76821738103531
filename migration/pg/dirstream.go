package pg

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sluicedb/sluice/migration"
)

// The cold directory stream (stop-and-copy) is a tar archive of a stopped
// data directory, WAL included, written by LocalSource.SendCold and read by
// LocalTarget.OpenSnapshot, ended by the checksum list (checksumEntry) and an
// entry named endMarker whose body is the number of entries before it: a
// stream cut short is never taken for a complete copy, nor a corrupt file
// for a good one. (Hot snapshots use package snapshot's stream.)
const endMarker = ".sluice-end"

// checksumEntry is the entry before the end marker that lists the CRC-32C
// (Castagnoli) of every file sent, one "%08x name" line each, so the target
// verifies each file as it wrote it (as the hot snapshot stream does).
const checksumEntry = ".sluice-crc32c"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Entries a hot copy leaves out (pg_basebackup's list): the contents of
// these directories are skipped but the directories are created, and these
// files are skipped wherever they are.
var (
	hotEmptyDirs = map[string]bool{
		"pg_wal": true, "pg_replslot": true, "pg_stat_tmp": true, "pg_dynshmem": true,
		"pg_notify": true, "pg_serial": true, "pg_snapshots": true, "pg_subtrans": true,
		"log": true,
	}
	coldEmptyDirs = map[string]bool{"pg_replslot": true, "log": true, "pg_stat_tmp": true}
	skipFiles     = map[string]bool{
		"postmaster.pid": true, "postmaster.opts": true, "standby.signal": true,
		"recovery.signal": true, "backup_label": true, "tablespace_map": true,
		"backup_label.old": true, "pg_internal.init": true, "promote": true,
	}
)

// streamWriter paces and counts bytes written to the stream.
type streamWriter struct {
	ctx  context.Context
	w    io.Writer
	lim  migration.Limiter
	n    int64
	done func(int64)
}

func (s *streamWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		c := min(len(b), migration.ChunkBytes)
		if s.lim != nil {
			if err := s.lim.WaitN(s.ctx, c); err != nil {
				return written, err
			}
		}
		n, err := s.w.Write(b[:c])
		written += n
		s.n += int64(n)
		if s.done != nil {
			s.done(s.n)
		}
		if err != nil {
			return written, err
		}
		b = b[c:]
	}
	return written, nil
}

// dirSize returns the bytes a stream of dir would carry (regular files), for
// progress and preflight.
func dirSize(dir string, emptyDirs map[string]bool) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() && emptyDirs[filepath.ToSlash(rel)] {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() && !skipFiles[d.Name()] {
			if fi, err := d.Info(); err == nil {
				total += fi.Size()
			}
		}
		return nil
	})
	return total, err
}

// sendDir writes dir as a tar stream to w (not closing w), skipping the
// contents of emptyDirs and skipFiles, then the documents in order, then the
// end marker. Files are sent at the size they had when opened; a file that
// shrinks is padded with zeros (a hot copy's WAL replay repairs it), a file
// that vanishes is skipped.
func sendDir(ctx context.Context, dir string, w io.Writer, emptyDirs map[string]bool, docs func() ([][2]string, error)) error {
	tw := tar.NewWriter(w)
	count := 0
	var sums strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		switch {
		case d.IsDir():
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o700}); err != nil {
				return err
			}
			count++
			if emptyDirs[rel] || strings.HasPrefix(d.Name(), "pgsql_tmp") {
				return filepath.SkipDir
			}
			return nil
		case !d.Type().IsRegular() || skipFiles[d.Name()] || strings.HasPrefix(d.Name(), "pgsql_tmp"):
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		size := fi.Size()
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o600, Size: size}); err != nil {
			return err
		}
		h := crc32.New(castagnoli)
		out := io.MultiWriter(tw, h)
		n, err := io.CopyN(out, f, size)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if n < size { // shrank while read
			if _, err := io.CopyN(out, zeroReader{}, size-n); err != nil {
				return err
			}
		}
		fmt.Fprintf(&sums, "%08x %s\n", h.Sum32(), rel)
		count++
		return nil
	})
	if err != nil {
		return fmt.Errorf("migration: send %s: %w", dir, err)
	}
	if docs != nil {
		ds, err := docs()
		if err != nil {
			return err
		}
		for _, d := range ds {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: d[0], Mode: 0o600, Size: int64(len(d[1]))}); err != nil {
				return err
			}
			if _, err := io.WriteString(tw, d[1]); err != nil {
				return err
			}
			fmt.Fprintf(&sums, "%08x %s\n", crc32.Checksum([]byte(d[1]), castagnoli), d[0])
			count++
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: checksumEntry, Mode: 0o600, Size: int64(sums.Len())}); err != nil {
		return err
	}
	if _, err := io.WriteString(tw, sums.String()); err != nil {
		return err
	}
	count++
	body := strconv.Itoa(count)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: endMarker, Mode: 0o600, Size: int64(len(body))}); err != nil {
		return err
	}
	if _, err := io.WriteString(tw, body); err != nil {
		return err
	}
	return tw.Close()
}

type zeroReader struct{}

func (zeroReader) Read(b []byte) (int, error) { clear(b); return len(b), nil }

// receiveDir extracts a stream written by sendDir into dest (which must
// exist), giving everything to uid/gid when chown is set. Paths that would
// leave dest are rejected; a stream without its end marker, or whose count
// disagrees, is an error.
func receiveDir(r io.Reader, dest string, chown func(string) error) (int64, error) {
	tr := tar.NewReader(r)
	count := 0
	var bytes int64
	got := map[string]uint32{} // CRC-32C of each file as written here
	checked := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return bytes, fmt.Errorf("migration: receive: stream ended without its end marker after %d entries", count)
		}
		if err != nil {
			return bytes, fmt.Errorf("migration: receive: %w", err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if name == endMarker {
			b, err := io.ReadAll(io.LimitReader(tr, 32))
			if err != nil {
				return bytes, fmt.Errorf("migration: receive: %w", err)
			}
			if want, err := strconv.Atoi(string(b)); err != nil || want != count {
				return bytes, fmt.Errorf("migration: receive: stream says %s entries, got %d", b, count)
			}
			if !checked {
				return bytes, fmt.Errorf("migration: receive: stream without its checksum list")
			}
			io.Copy(io.Discard, r) // drain tar padding so the sender's writes complete
			return bytes, nil
		}
		if name == "" || path.IsAbs(name) || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") {
			return bytes, fmt.Errorf("migration: receive: bad path %q", h.Name)
		}
		if name == checksumEntry {
			if err := verifySums(tr, got); err != nil {
				return bytes, err
			}
			checked = true
			count++
			continue
		}
		p := filepath.Join(dest, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o700); err != nil {
				return bytes, fmt.Errorf("migration: receive: %w", err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				return bytes, fmt.Errorf("migration: receive: %w", err)
			}
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				return bytes, fmt.Errorf("migration: receive: %w", err)
			}
			sum := crc32.New(castagnoli)
			n, err := io.Copy(io.MultiWriter(f, sum), tr)
			bytes += n
			got[name] = sum.Sum32()
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return bytes, fmt.Errorf("migration: receive %s: %w", name, err)
			}
		default:
			return bytes, fmt.Errorf("migration: receive: unsupported entry %q type %c", h.Name, h.Typeflag)
		}
		if chown != nil {
			if err := chown(p); err != nil {
				return bytes, err
			}
		}
		count++
	}
}

// verifySums reads the checksum list from r and compares it with the CRC-32C
// of the files received (got): a file whose sum differs, a listed file that
// did not arrive and an arrived file the list does not name are errors.
func verifySums(r io.Reader, got map[string]uint32) error {
	b, err := io.ReadAll(io.LimitReader(r, 256<<20))
	if err != nil {
		return fmt.Errorf("migration: receive: checksum list: %w", err)
	}
	listed := 0
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		hexSum, name, ok := strings.Cut(line, " ")
		want, perr := strconv.ParseUint(hexSum, 16, 32)
		if !ok || perr != nil {
			return fmt.Errorf("migration: receive: bad checksum line %q", line)
		}
		have, ok := got[name]
		switch {
		case !ok:
			return fmt.Errorf("migration: receive: %s is in the checksum list but was not received", name)
		case have != uint32(want):
			return fmt.Errorf("migration: receive %s: CRC-32C %08x, sender's %08x: the copy is corrupt", name, have, want)
		}
		listed++
	}
	if listed != len(got) {
		return fmt.Errorf("migration: receive: %d files received, %d in the checksum list", len(got), listed)
	}
	return nil
}
