package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/keyspace"
)

// reshardSpread puts p1 and p3 on a1 (which holds the keyspace and drives)
// and p2 on its peer a2.
var reshardSpread = map[string]string{"p1": "a1", "p2": "a2", "p3": "a1"}

// reshardPlanSpread moves keys 500…999 p1→p2 (a1→a2), 1500…1999 p2→p3
// (a2→a1) and 2800… p3→p1 (a1→a1).
var reshardPlanSpread = keyspace.PlanSpec{"acct": {"p1": "[,500),[2800,)", "p2": "[500,1500)", "p3": "[1500,2800)"}}

// restartPeer stops a2 abruptly and starts it again on cfg.
func (r *reshardRig) restartPeer(t *testing.T, cfg Config) {
	t.Helper()
	r.peer.stop()
	r.peerCfg = cfg
	r.peer = startAgent(t, cfg)
}

// TestReshardPeers: a keyspace whose partitions live on two agents is
// reconfigured under load through the proxy, chunks moving a1→a2, a2→a1
// and a1→a1: a2 pulls from a1's copyout stream, a1 from a2's, and a1 over
// its own sockets. Before that, with a2 not knowing a1 as a peer, the
// reconfiguration is refused up front with nothing changed. At the end
// the ledger is exact, the keyspace check clean, and no fence is left on
// any partition.
func TestReshardPeers(t *testing.T) {
	r := newReshardRigOn(t, 300, reshardSpread)
	ctx := ctxT(t)

	lonely := r.peerCfg
	lonely.Peers = nil
	r.restartPeer(t, lonely)
	_, err := r.a.c.Reshard(ctx, "bank", client.ReshardRequest{Plan: reshardPlanSpread, Method: client.MethodSquall})
	if client.StatusOf(err) != 400 || !strings.Contains(err.Error(), "not one of its peers") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("a destination that cannot reach its source: %v; want a one-line 400", err)
	}
	if _, err := r.a.c.ReshardStatus(ctx, "bank", false); client.StatusOf(err) != 404 {
		t.Fatalf("status after the refusal: %v, want 404 (nothing recorded)", err)
	}
	r.fencesGone(t)
	befriended := lonely
	befriended.Peers = map[string]string{"a1": "http://" + r.cfg.Listen}
	r.restartPeer(t, befriended)

	load := newBankLoad(r.cs)
	stop := background(func(ctx context.Context) { load.run(ctx, 4) })
	defer stop()
	load.waitAcked(t, 300)
	st, err := r.a.c.Reshard(ctx, "bank", client.ReshardRequest{Plan: reshardPlanSpread, Method: client.MethodSquall, ChunkBytes: 64 << 10, PaceDelayMs: 50})
	if err != nil {
		t.Fatal(err)
	}
	st = waitReshard(t, r.a.c, 3*time.Minute, nil)
	n := load.count()
	load.waitAcked(t, n+300) // the load goes on on the new plan
	stop()
	if st.Phase != client.PhaseDone || st.Progress.Complete != st.Progress.Chunks || st.Progress.Cleaned != st.Progress.Chunks {
		t.Fatalf("reconfiguration ended %+v", st)
	}
	full, err := r.a.c.ReshardStatus(ctx, "bank", true)
	if err != nil {
		t.Fatal(err)
	}
	pairs := map[string]int{}
	for _, c := range full.Chunks {
		pairs[reshardSpread[c.Chunk.From]+"→"+reshardSpread[c.Chunk.To]]++
	}
	if pairs["a1→a2"] == 0 || pairs["a2→a1"] == 0 || pairs["a1→a1"] == 0 {
		t.Fatalf("chunks by agents %v: want a1→a2, a2→a1 and a1→a1", pairs)
	}
	t.Logf("reconfiguration: %d chunks %v, switch hold %.1f ms, %s, %d reactive and %d asynchronous pulls, %d bytes copied",
		st.Progress.Chunks, pairs, st.SwitchMs, st.Finished.Sub(st.Started), st.ReactivePulls, st.AsyncPulls, st.BytesCopied)
	load.verify(t, r, reshardPlanSpread)
	r.checkClean(t)
	r.fencesGone(t)
}

// TestReshardPeerCrash: every chunk moves from a1's partitions to p2 on
// a2; in mid-reconfiguration under load a2 — the destinations' agent, not
// the driver — stops abruptly and restarts; the reconfiguration
// completes, the ledger exact and the keyspace check clean.
func TestReshardPeerCrash(t *testing.T) {
	r := newReshardRigOn(t, 1500, reshardSpread)
	ctx := ctxT(t)
	load := newBankLoad(r.cs)
	load.pick = mostlyStaying
	stop := background(func(ctx context.Context) { load.run(ctx, 4) })
	defer stop()
	load.waitAcked(t, 300)
	if _, err := r.a.c.Reshard(ctx, "bank", client.ReshardRequest{Plan: reshardPlan1, Method: client.MethodSquall, ChunkBytes: 64 << 10, PaceDelayMs: 200}); err != nil {
		t.Fatal(err)
	}
	progressed := func(n int) func(client.ReshardStatus) bool {
		return func(st client.ReshardStatus) bool { return st.Phase == client.PhaseMoving && st.Progress.Complete >= n }
	}
	st := waitReshard(t, r.a.c, time.Minute, progressed(2))
	r.peer.stop() // a pull in flight at a2 rolls back; the driver's calls to a2 fail until it is back
	t.Logf("a2 stopped at %d/%d chunks", st.Progress.Complete, st.Progress.Chunks)
	time.Sleep(time.Second)
	if st2, err := r.a.c.ReshardStatus(ctx, "bank", false); err != nil || st2.Phase != client.PhaseMoving {
		t.Fatalf("while a2 is down: %+v, %v; want it still moving", st2, err)
	}
	r.peer = startAgent(t, r.peerCfg)
	r.doneUnderLoad(t, load, stop)
}
