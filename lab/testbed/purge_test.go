package testbed

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWaitPurged: the bed sees the agents' retired tenant directories and
// waits until they are gone, or gives up at its bound.
func TestWaitPurged(t *testing.T) {
	b := &Bed{root: t.TempDir()}
	ctx := context.Background()
	if _, err := b.WaitPurged(ctx, time.Minute); err != nil {
		t.Fatalf("nothing retired: %v", err)
	}
	live := filepath.Join(b.root, "server-a", "tenants", "1")
	retired := filepath.Join(b.root, "server-b", "tenants", "1.retired-1795573335")
	for _, d := range []string{live, filepath.Join(retired, "base")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.RetiredDirs(); len(got) != 1 || got[0] != retired {
		t.Fatalf("RetiredDirs = %q, want [%s]", got, retired)
	}
	if _, err := b.WaitPurged(ctx, 300*time.Millisecond); err != nil || len(b.RetiredDirs()) != 1 {
		t.Fatalf("at its bound WaitPurged returned %v with %d left, want nil with the directory left", err, len(b.RetiredDirs()))
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		os.RemoveAll(retired)
	}()
	if _, err := b.WaitPurged(ctx, time.Minute); err != nil || len(b.RetiredDirs()) != 0 {
		t.Fatalf("WaitPurged returned %v with %q left", err, b.RetiredDirs())
	}
	os.MkdirAll(retired, 0o755)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.WaitPurged(cctx, time.Minute); err == nil {
		t.Fatal("WaitPurged with an ended context returned no error")
	}
}
