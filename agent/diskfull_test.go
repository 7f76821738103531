package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/pgtest"
)

// TestTargetDiskFull fills the target agent's filesystem (a small tmpfs
// holding its root: catalog, template, tenants) while a migration copies
// into it or while its standby catches up. The migration must roll back
// on its own within the bound, the source serving throughout with every
// acknowledged write, the target's partial copy removed and its catalog
// updated — an abort frees the space before it writes anything there.
func TestTargetDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	for _, tc := range []struct {
		name, point, catchUp string
		leave                int64 // bytes left free
	}{
		{"mid-copy", "before:stream-snapshot", "", 8 << 20}, // the copy stops 8 MiB in
		{"mid-catch-up", "before:wait-catch-up", "15s", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fsDir string
			r := newFaultRig(t, rigOptions{mb: 24, mod: func(i int, c *Config) {
				if i == 1 {
					fsDir = mountTmpfs(t, c.Root, "512m")
					c.Root = fsDir
					stopTenants(t, c.Root)
				}
			}})
			ctx := ctxT(t)
			w := &ledgerWriter{conns: []string{r.proxyCS}, pause: 5 * time.Millisecond}
			stopW := background(w.run)
			defer stopW()
			r.pause(tc.point)
			m, err := r.src.c.StartMigration(ctx, client.StartMigration{Tenant: r.tn.ID, To: r.dstCfg.Name, CatchUpTimeout: tc.catchUp})
			if err != nil {
				t.Fatal(err)
			}
			r.waitPaused(m.ID)
			fillFS(t, fsDir, tc.leave)
			r.resume()
			m = waitMigration(t, r.src.c, m.ID, faultBound, nil)
			n, _, _ := w.stats()
			r.waitWrites(w, n)
			stopW()
			t.Logf("outcome %s: %s", m.Outcome, m.Error)
			if m.Outcome != "aborted" {
				t.Fatalf("outcome %s (%s), want aborted", m.Outcome, m.Error)
			}
			if tc.name == "mid-copy" && !strings.Contains(m.Error, "no space left on device") {
				t.Fatalf("the error does not say the disk is full: %s", m.Error)
			}
			r.checkOutcome(m, w)
		})
	}
}

// mountTmpfs mounts a tmpfs of size on a new directory, copies src (an
// agent root with its template) into it and returns it; unmounted at the
// end of the test.
func mountTmpfs(t *testing.T, src, size string) string {
	t.Helper()
	dir := filepath.Join(pgtest.TempDir(t), "fs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	if out, err := exec.Command("cp", "-a", src+"/.", dir).CombinedOutput(); err != nil {
		t.Fatalf("copy root: %v: %s", err, out)
	}
	return dir
}

// fillFS takes every free byte of the filesystem at dir but leave.
func fillFS(t *testing.T, dir string, leave int64) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	for _, size := range []int{1 << 20, 4 << 10} { // MBs, then what is left
		buf := make([]byte, size)
		for {
			k, err := f.Write(buf)
			n += int64(k)
			if err != nil {
				break
			}
		}
	}
	if err := f.Truncate(max(n-leave, 0)); err != nil {
		t.Fatal(err)
	}
	free := n - leave
	t.Logf("filled %s with %d MB", dir, free>>20)
}
