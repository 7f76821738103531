package migration

import (
	"errors"
	"time"
)

// Progress is what Run reports while it works.
type Progress struct {
	ID         string        `json:"id"`
	Phase      Phase         `json:"phase"`
	Action     string        `json:"action"`
	BytesDone  int64         `json:"bytes_done"`  // of the current copy (snapshot, cold copy, warm)
	BytesTotal int64         `json:"bytes_total"` // estimate; 0 unknown
	Rate       float64       `json:"rate"`        // bytes/s over the current copy so far; in CATCH-UP, WAL shipped since the phase began
	ETA        time.Duration `json:"eta_ns"`      // copy: at Rate; CATCH-UP: at the lag's fitted pace (catchUpOutlook); 0 unknown
	LagBytes   int64         `json:"lag_bytes"`   // standby replay lag; -1 unknown
	// Warning, when set, says in one line that CATCH-UP will not end
	// before its timeout (Record.CatchUpTimeout, else Env.CatchUpTimeout)
	// rolls the migration back, at the lag's pace (catchUpOutlook); it
	// clears when the pace recovers.
	Warning string `json:"warning,omitempty"`
}

// progress reports the phase and the lag (progressBytes with no copy bytes).
func (r *runner) progress(rec Record, action string, force bool) {
	r.progressBytes(rec, action, 0, force)
}

// progressBytes reports the phase, the lag and, for a copy, done bytes of
// it with their rate and ETA; at most every ProgressEvery unless forced. In
// CATCH-UP, with a relay that counts the WAL (walRelayed), the rate is the
// WAL shipped per second since the phase began (the snapshot's bytes no
// longer move, so their rate would read 0), and the ETA and Warning are the
// lag trend's.
func (r *runner) progressBytes(rec Record, action string, done int64, force bool) {
	if r.env.Progress == nil {
		return
	}
	now := r.env.Now()
	if !force && now.Sub(r.lastProgress) < r.env.ProgressEvery {
		return
	}
	r.lastProgress = now
	p := Progress{ID: rec.ID, Phase: rec.Phase, Action: action, BytesDone: done, BytesTotal: r.copyTotal, LagBytes: rec.LagBytes}
	if r.lag != 0 {
		p.LagBytes = r.lag
	}
	if done > 0 && !r.copyStart.IsZero() {
		if el := now.Sub(r.copyStart).Seconds(); el > 0 {
			p.Rate = float64(done) / el
			if p.Rate > 0 && r.copyTotal > done {
				p.ETA = time.Duration(float64(r.copyTotal-done) / p.Rate * float64(time.Second))
			}
		}
	}
	if rec.Phase == PhaseCatchUp && !r.catchUpStart.IsZero() {
		if n, ok := r.walRelayed(); ok {
			p.Rate = shipRate(n-r.walAtCatchUp, now.Sub(r.catchUpStart))
		}
		p.ETA, p.Warning = catchUpOutlook(&r.trend, p.LagBytes, rec.CatchUpBytes, r.catchUpStart.Add(r.catchUpTimeout(rec)).Sub(now))
	}
	if r.warning != "" {
		p.Warning = r.warning
	}
	r.env.Progress(p)
}

// walRelayed is the WAL the standby's relay has passed so far (the
// Target's relay, else the Source's: WALRelayer); false when neither counts
// it.
func (r *runner) walRelayed() (int64, bool) {
	n, err := r.env.Target.WALRelayed()
	if errors.Is(err, ErrUnsupported) {
		n, err = r.env.Source.WALRelayed()
	}
	return n, err == nil
}

// shipRate is n bytes over d, bytes/s; 0 for no time or no bytes.
func shipRate(n int64, d time.Duration) float64 {
	if n <= 0 || d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
