package agent

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicedb/sluice/agent/client"
)

// faultsAll runs the whole fault matrix (make test-faults); without it
// TestFaultMatrix runs the representative subset marked short.
var faultsAll = flag.Bool("faults.all", false, "run the whole fault-injection matrix (make test-faults)")

// faultPoints are the named points of the source's driver at which a
// component is killed, one per phase (migration.Env.Hook).
var faultPoints = []struct{ phase, point string }{
	{"snapshot", "during:stream-snapshot"},
	{"catch-up", "before:wait-catch-up"},
	{"warm", "before:warm"},
	{"handover-held", "before:fence"},
	{"handover-switched", "before:release"},
	{"cleanup", "before:cleanup"},
}

// faultComponents are the processes killed (-9) and how an operator — or
// nobody — brings each back.
var faultComponents = []string{"source-agent", "target-agent", "proxy", "source-pg", "target-pg", "wal-relay"}

// subset is the cells `make test` runs: the failures found by hand (a
// restarted proxy; the source's WAL relay dying in WARM) and one cell of
// every other component.
var faultSubset = map[string]bool{
	"proxy/catch-up":             true,
	"proxy/handover-held":        true,
	"proxy/handover-switched":    true,
	"proxy/cleanup":              true,
	"wal-relay/warm":             true,
	"source-agent/handover-held": true,
	"target-agent/catch-up":      true,
	"source-pg/catch-up":         true,
	"target-pg/catch-up":         true,
}

// TestFaultMatrix kills -9 each component at a named point of each phase of
// a live migration under a write workload through the proxy, brings it back
// as an operator would (agents and proxy: the same command again;
// postmasters: nothing — the agent restarts a crashed postmaster), and
// checks: the migration committed or rolled back within a bound; at no
// sample were both copies writable (tried by writing, not by reading state);
// every acknowledged write is on the copy that serves after, exactly once;
// the tenant is reachable through the proxy again. "wal-relay" is the WAL
// relay on the source (--wal-relay source), killed with its agent.
func TestFaultMatrix(t *testing.T) {
	for _, comp := range faultComponents {
		for _, fp := range faultPoints {
			name := comp + "/" + fp.phase
			t.Run(name, func(t *testing.T) {
				if !*faultsAll && !faultSubset[name] {
					t.Skip("in the full matrix only (make test-faults)")
				}
				if comp == "target-pg" && fp.phase == "snapshot" {
					t.Skip("the target has no postmaster until its standby starts")
				}
				runFaultCell(t, comp, fp.point)
			})
		}
	}
}

// faultBound is how long a cell's migration may take to end after the fault.
const faultBound = 3 * time.Minute

func runFaultCell(t *testing.T, comp, point string) {
	r := newFaultRig(t, rigOptions{mb: 16})
	ctx := ctxT(t)
	w := &ledgerWriter{conns: []string{r.proxyCS}, pause: 5 * time.Millisecond}
	stopW := background(w.run)
	defer stopW()
	probe := &ownerProbe{cs: [2]string{r.srcCS, r.dstCS}}
	stopP := background(probe.run)
	defer stopP()
	time.Sleep(300 * time.Millisecond)

	r.pause(point)
	req := client.StartMigration{Tenant: r.tn.ID, To: r.dstCfg.Name}
	if comp == "wal-relay" {
		req.WALRelay = client.WALRelaySource
	}
	m, err := r.src.c.StartMigration(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	r.waitPaused(m.ID)
	t.Logf("paused at %s; killing %s", point, comp)
	r.kill(comp)
	if comp == "proxy" && point == "before:fence" {
		// Held, not fenced: the restarted proxy learns the tenant from the
		// catalogs; the writer must not get a write past it to the source
		// before the fence (it would be lost: the fence's LSN would not
		// cover it).
		r.waitProxyRoute(r.tn.Port, true)
		time.Sleep(500 * time.Millisecond) // a hundred write attempts
	}
	if comp == "proxy" && point == "before:release" {
		// Switched, not released: the restarted proxy must route the
		// tenant to the target and hold it, from the catalogs alone.
		r.waitProxyRoute(r.dstCfg.Tenant.BasePort+int(r.tn.ID), true)
	}
	if comp == "proxy" && point == "before:cleanup" {
		// Released, not finished: the restarted proxy must find the
		// writable copy (the target) from the catalogs alone, while the
		// driver still waits.
		n, _, _ := w.stats()
		r.waitWrites(w, n)
	}
	if comp != "source-agent" && comp != "wal-relay" {
		r.resume()
	}
	m = waitMigration(t, r.src.c, m.ID, faultBound, nil)
	acked0, _, _ := w.stats()
	r.waitWrites(w, acked0)
	stopW()
	stopP()
	acked, errs, _ := w.stats()
	samples, both, writable := probe.result()
	t.Logf("outcome %s (%s); %d writes acknowledged, %d errors (last %q); probe: %d samples, writable source %d, target %d, both %d",
		m.Outcome, m.Error, acked, errs, w.last, samples, writable[0], writable[1], both)
	if both > 0 {
		t.Fatalf("two writable copies in %d samples (first at %s)", both, probe.firstTwo.Format(time.RFC3339Nano))
	}
	if want := wantOutcome(comp, point); want != "" && m.Outcome != want {
		t.Fatalf("outcome %s (%s), want %s", m.Outcome, m.Error, want)
	}
	r.checkOutcome(m, w)
}

// wantOutcome is the outcome the design promises for a cell, "" where
// either is fine (a postmaster killed mid-stream may or may not cost the
// migration).
func wantOutcome(comp, point string) string {
	switch comp {
	case "source-agent", "wal-relay":
		// Resumed, except mid-handover before the switch: rolled back.
		if point == "before:fence" {
			return "aborted"
		}
		return "committed"
	case "target-agent":
		if point == "during:stream-snapshot" {
			return "aborted" // the stream broke
		}
		return "committed"
	case "proxy":
		return "committed" // the proxy holds no state a migration needs
	case "target-pg":
		if point == "before:wait-catch-up" {
			return "committed" // its agent restarts it; catch-up waits through the outage
		}
	}
	return ""
}

// kill kills comp -9 and brings it back as an operator would.
func (r *faultRig) kill(comp string) {
	r.t.Helper()
	switch comp {
	case "source-agent", "wal-relay":
		r.src.kill9()
		r.src.start()
	case "target-agent":
		r.dst.kill9()
		r.dst.start()
	case "proxy":
		r.proxy.kill9()
		r.proxy.start()
	case "source-pg":
		syscall.Kill(r.postmasterPID(r.srcCfg.Root), syscall.SIGKILL)
	case "target-pg":
		syscall.Kill(r.postmasterPID(r.dstCfg.Root), syscall.SIGKILL)
	default:
		r.t.Fatalf("unknown component %q", comp)
	}
}

// waitWrites waits until the writer has had writes acknowledged after the
// migration ended: the tenant is reachable through the proxy again.
func (r *faultRig) waitWrites(w *ledgerWriter, after int) {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if n, _, _ := w.stats(); n > after+20 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.t.Fatalf("no write through the proxy succeeded within 30 s (last error %q)", w.last)
}

// checkOutcome checks where the tenant lives after m ended and the ledger
// there.
func (r *faultRig) checkOutcome(m client.Migration, w *ledgerWriter) {
	r.t.Helper()
	ctx := ctxT(r.t)
	srcT, _ := r.src.c.Tenant(ctx, r.tn.ID)
	dstT, dstErr := r.dst.c.Tenant(ctx, r.tn.ID)
	switch m.Outcome {
	case "committed":
		if srcT.State != "moved" || dstErr != nil || dstT.State != "running" || !dstT.Alive {
			r.t.Fatalf("after commit: source %+v, target %+v (%v)", srcT, dstT, dstErr)
		}
		w.verify(r.t, r.dstCS)
	case "aborted":
		if srcT.State != "running" || !srcT.Alive || dstErr == nil {
			r.t.Fatalf("after abort: source %+v, target %+v (%v)", srcT, dstT, dstErr)
		}
		if _, err := os.Stat(filepath.Join(r.dstCfg.Root, "tenants", strconv.FormatInt(r.tn.ID, 10))); !os.IsNotExist(err) {
			r.t.Fatalf("target directory left after abort: %v", err)
		}
		w.verify(r.t, r.srcCS)
	default:
		r.t.Fatalf("outcome %q (%s)", m.Outcome, m.Error)
	}
}

// TestRollbackWithoutProxyRoute: a proxy that has no route for the tenant
// (it follows no catalog, or restarted and lost one set through its API)
// cannot hold it, so the handover rolls back — and the rollback, which
// switches back and releases on that same proxy, must finish rather than
// retry forever on "unknown tenant".
func TestRollbackWithoutProxyRoute(t *testing.T) {
	r := newFaultRig(t, rigOptions{mb: 4, noCatalog: true})
	ctx := ctxT(t)
	w := &ledgerWriter{conns: []string{r.srcCS}, pause: 5 * time.Millisecond}
	stopW := background(w.run)
	defer stopW()
	m, err := r.src.c.StartMigration(ctx, client.StartMigration{Tenant: r.tn.ID, To: r.dstCfg.Name})
	if err != nil {
		t.Fatal(err)
	}
	m = waitMigration(t, r.src.c, m.ID, faultBound, nil)
	stopW()
	if m.Outcome != "aborted" || !strings.Contains(m.Error, "unknown tenant") {
		t.Fatalf("outcome %s (%s), want aborted on the proxy's unknown tenant", m.Outcome, m.Error)
	}
	r.checkOutcome(m, w)
}
