package pg

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestWritebackDelay(t *testing.T) {
	for _, c := range []struct {
		expire, period int
		want           time.Duration
	}{
		{3000, 500, 40 * time.Second},
		{-1, -1, 40 * time.Second},
		{1000, 0, 20 * time.Second},
		{500, 100, 7 * time.Second},
	} {
		if got := writebackDelay(c.expire, c.period); got != c.want {
			t.Errorf("writebackDelay(%d, %d) = %s, want %s", c.expire, c.period, got, c.want)
		}
	}
}

// TestDropCache: dropCache drops a written-back file's pages from the page
// cache (what Retire relies on once WritebackDelay has passed), and leaves
// the file itself alone.
func TestDropCache(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "base", "16384")
	os.MkdirAll(filepath.Dir(p), 0o755)
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i)
	}
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(p)
	unix.Fdatasync(int(f.Fd())) // the kernel's own writeback, done now
	f.Close()
	if _, err := os.ReadFile(p); err != nil {
		t.Fatal(err)
	}
	before := residentPages(t, p)
	if before == 0 {
		t.Skip("the page cache holds none of a file just read (nothing to drop here)")
	}
	dropCache(dir)
	if after := residentPages(t, p); after*10 > before {
		t.Fatalf("dropCache left %d of %d cached pages", after, before)
	}
	if b, err := os.ReadFile(p); err != nil || len(b) != len(data) {
		t.Fatalf("the file changed: %d bytes, %v", len(b), err)
	}
}

// TestPurge: Purge deletes a tree (files cut in steps, then removed), says
// how many bytes it freed, stops when its context ends leaving the rest, and
// takes a missing directory as done.
func TestPurge(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "t.retired-1")
	sizes := map[string]int{"base/1/16384": 3*PurgeStep + 5, "base/1/16385": 10, "global/pg_control": 8192, "pg_wal/000000010000000000000001": PurgeStep}
	total := 0
	for p, n := range sizes {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, p), make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
		total += n
	}
	os.MkdirAll(filepath.Join(dir, "pg_tblspc"), 0o755)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Purge(ctx, dir, 1); err == nil {
		t.Fatal("Purge with an ended context returned no error")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("an interrupted purge removed the directory: %v", err)
	}
	freed, err := Purge(context.Background(), dir, 1e12)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s still there after Purge (%v)", dir, err)
	}
	// The interrupted purge may have cut the first file's first step.
	if freed > int64(total) || freed < int64(total-PurgeStep) {
		t.Errorf("Purge freed %d bytes of %d", freed, total)
	}
	if _, err := Purge(context.Background(), dir, 0); err != nil {
		t.Errorf("Purge of a missing directory: %v", err)
	}
}
