package experiment

import (
	"context"
	"fmt"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
)

// statusPoll is how often the bench reads the driver's status.
const statusPoll = 250 * time.Millisecond

// method runs method m on a fresh keyspace: the workload for Before, the
// change, the workload for After once it is done (or until bound from the
// request: the method is then cut, the workload stopped, and the change
// finished by pulling its remaining chunks, at most FinishWait), then the
// ledger and the keyspace checks. The keyspace is dropped after.
func (x *reshardRun) method(ctx context.Context, m string, bound time.Duration) (ReshardMethodResult, error) {
	o := x.o
	mr := ReshardMethodResult{Method: m, BoundS: bound.Seconds()}
	ks, dsns, err := x.fresh(ctx, m)
	defer x.drop(ctx, m)
	if err != nil {
		return mr, err
	}
	stop := make(chan struct{})
	stopOnce := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
	}
	defer stopOnce()
	log := newSecondLog(o.Before, o.Progress)
	longest := o.Before + bound + o.After + o.FinishWait + time.Minute
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wl := x.startWorkload(wctx, ks, dsns, stop, longest, log.each)
	select {
	case <-log.reach:
	case r := <-wl:
		return mr, fmt.Errorf("experiment: reshard: %s: the workload ended before the change: %v", m, r.err)
	}
	req := agentclient.ReshardRequest{Plan: x.plan.new, Method: m, ChunkBytes: o.ChunkBytes}
	if m == agentclient.MethodControlled {
		mr.SetpointMs = o.SetpointMs
		if mr.SetpointMs == 0 {
			base := int((o.Warmup + time.Second - 1) / time.Second)
			mr.SetpointMs = round(o.SetpointFactor*log.p99(base, int(o.Before/time.Second)), 2)
		}
		req.Control = &agentclient.Control{Controller: "pid", Stat: "p99", SetpointMs: mr.SetpointMs}
	}
	requested := time.Now()
	st, err := x.agent.Reshard(ctx, ks.Name, req)
	if err != nil {
		stopOnce()
		<-wl
		if notBuilt(err) {
			return mr, fmt.Errorf("%w: %v", ErrReshardNotBuilt, err)
		}
		return mr, fmt.Errorf("experiment: reshard: %s: start: %w", m, err)
	}
	o.Progress("  %s: requested (phase %s, %d chunks)", m, st.Phase, st.Progress.Chunks)
	st, points := x.follow(ctx, ks.Name, st, requested.Add(bound))
	ended := time.Now()
	mr.Finished = st.Phase == agentclient.PhaseDone
	switch {
	case mr.Finished:
		sleepCtx(ctx, o.After)
	case st.Phase == agentclient.PhaseFailed:
		mr.Error = st.Error
	}
	stopOnce()
	if !mr.Finished && st.Phase != agentclient.PhaseFailed {
		st, mr.FinishedBy = x.finish(ctx, ks.Name, st, m)
	}
	r, drained := x.drain(ctx, wl, wcancel, m)
	if r.err != nil && drained {
		return mr, fmt.Errorf("experiment: reshard: %s: workload: %w", m, r.err)
	}
	x.fill(&mr, st, points, r, requested, ended)
	if !drained {
		mr.LedgerOK, mr.Verdict = false, fmt.Sprintf("ledger NOT verified: transactions still in flight %v after the workload stopped were cancelled", o.DrainWait)
	}
	ck, err := x.agent.CheckKeyspace(ctx, ks.Name)
	if err != nil {
		return mr, fmt.Errorf("experiment: reshard: %s: keyspace check: %w", m, err)
	}
	mr.KeyspaceCheckOK, mr.KeyspaceMisplaced, mr.ReferenceEqual = ck.OK, ck.Misplaced, true
	for _, rc := range ck.Reference {
		mr.ReferenceEqual = mr.ReferenceEqual && rc.Equal
	}
	return mr, nil
}

// drain waits for the stopped workload's result, at most DrainWait; then
// it cancels the transactions still in flight (a change that holds them
// for good) and takes the result without a verdict: drained false.
func (x *reshardRun) drain(ctx context.Context, wl <-chan wlResult, cancel func(), m string) (wlResult, bool) {
	t := time.NewTimer(x.o.DrainWait)
	defer t.Stop()
	select {
	case r := <-wl:
		return r, true
	case <-t.C:
	case <-ctx.Done():
	}
	x.note("%s: the workload's transactions were still in flight %v after it stopped: cancelled, ledger not verified", m, x.o.DrainWait)
	cancel()
	return <-wl, false
}

// follow polls the change's status until it is done or failed, or until
// the bound; it returns the last status read and every poll's point.
func (x *reshardRun) follow(ctx context.Context, name string, st agentclient.ReshardStatus, bound time.Time) (agentclient.ReshardStatus, []statusAt) {
	var pts []statusAt
	fails := 0
	for st.Phase != agentclient.PhaseDone && st.Phase != agentclient.PhaseFailed && time.Now().Before(bound) {
		if !sleepCtx(ctx, statusPoll) {
			break
		}
		s, err := x.agent.ReshardStatus(ctx, name, false)
		if err != nil {
			if fails++; fails == 20 {
				x.note("%s: status unreadable 20 times in a row: %v", name, err)
			}
			continue
		}
		fails = 0
		if s.Phase != st.Phase {
			x.o.Progress("  phase %s → %s (%d/%d chunks)", st.Phase, s.Phase, s.Progress.Complete, s.Progress.Chunks)
		}
		st = s
		pts = append(pts, statusAt{at: time.Now(), st: s})
	}
	return st, pts
}

type statusAt struct {
	at time.Time
	st agentclient.ReshardStatus
}

// finish ends a change cut at its bound, the workload stopped: every
// chunk not yet complete is pulled on request (client.ReshardPull: a
// reactive pull, at the driver's full speed), one after another, and the
// change followed to done, for at most FinishWait in all.
func (x *reshardRun) finish(ctx context.Context, name string, st agentclient.ReshardStatus, m string) (agentclient.ReshardStatus, string) {
	by := "every remaining chunk pulled on request after the bound, workload stopped"
	fctx, cancel := context.WithTimeout(ctx, x.o.FinishWait)
	defer cancel()
	end := time.Now().Add(x.o.FinishWait)
	if st.Phase == agentclient.PhaseMoving {
		full, err := x.agent.ReshardStatus(fctx, name, true)
		if err != nil {
			x.note("%s: cut at its bound; its chunks unreadable (%v): left to its own course", m, err)
			by = "its own course after the bound, workload stopped"
		}
		for _, c := range full.Chunks {
			if c.State == "complete" {
				continue
			}
			if err := x.agent.ReshardPull(fctx, name, c.Chunk.ID); err != nil {
				x.note("%s: pull of chunk %d after the bound: %v", m, c.Chunk.ID, err)
				break
			}
		}
	}
	st, _ = x.follow(ctx, name, st, end)
	if st.Phase != agentclient.PhaseDone {
		x.note("%s: still %s %v after the bound; the checks below ran on an unfinished change", m, st.Phase, x.o.FinishWait)
		return st, "unfinished " + x.o.FinishWait.String() + " after the bound"
	}
	return st, by
}

// fill computes mr's figures from the workload's run r and the change's
// statuses; requested and ended are the change's request and the end of
// following it (done, failed or the bound).
func (x *reshardRun) fill(mr *ReshardMethodResult, st agentclient.ReshardStatus, pts []statusAt, r wlResult, requested, ended time.Time) {
	t0 := r.res.Started
	start, end := requested.Sub(t0), ended.Sub(t0)
	if mr.Finished && !st.Started.IsZero() && !st.Finished.IsZero() && st.Finished.After(st.Started) {
		start, end = st.Started.Sub(t0), st.Finished.Sub(t0)
	}
	n := int(r.res.Seconds) // whole seconds: the last, partial one would read as a dip
	mr.Seconds = perSecond(r.res.Txs, n)
	f := figures(r.res.Txs, mr.Seconds, window{Start: start, End: end, Before: x.o.Before, Warmup: x.o.Warmup})
	mr.ReconfigSeconds = round((end - start).Seconds(), 2)
	mr.StartS, mr.EndS = round(start.Seconds(), 2), round(end.Seconds(), 2)
	mr.PreTPS, mr.MeanTPSDuring, mr.MinTPS1s, mr.ZeroCommitSeconds = f.PreTPS, f.MeanTPSDuring, f.MinTPS1s, f.ZeroCommitSeconds
	mr.P99MsBefore, mr.P99MsDuring = f.P99MsBefore, f.P99MsDuring
	mr.Goals = goals(f)
	v := r.res.Verdict
	mr.WritesAcknowledged, mr.WritesMissing, mr.WritesDuplicated, mr.WritesMisplaced = v.Acknowledged, v.Lost, v.Duplicated, v.Misplaced
	mr.LedgerOK, mr.Verdict = v.OK(), v.String()
	mr.Transactions, mr.Errors = r.res.Transactions, r.res.Errors
	mr.Phase, mr.SwitchMs, mr.BytesCopied = st.Phase, st.SwitchMs, st.BytesCopied
	mr.Chunks, mr.ReactivePulls, mr.AsyncPulls = st.Progress.Chunks, st.ReactivePulls, st.AsyncPulls
	if mr.Error == "" {
		mr.Error = st.Error
	}
	for _, p := range pts {
		mr.Status = append(mr.Status, ReshardPoint{T: round(p.at.Sub(t0).Seconds(), 2), Phase: p.st.Phase,
			Complete: p.st.Progress.Complete, Chunks: p.st.Progress.Chunks, BytesCopied: p.st.BytesCopied,
			Rate: p.st.Rate, LatencyMs: p.st.LatencyMs})
	}
}

// sleepCtx sleeps d or until ctx ends; false when it ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
