package agent

import (
	"net/http"
	"sync"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/throttle"
)

// pausable stands between whoever sets a migration's rate (its control
// loop, an operator's POST …/rate) and the throttle: it remembers the rate
// last asked for and applies it, except while an operator has paused the
// migration, when the throttle stays at 0 (throttle.Limiter: waiters block
// until the rate is raised) and resuming applies the rate asked for last.
// Safe for concurrent use.
type pausable struct {
	lim *throttle.Limiter

	mu     sync.Mutex
	want   float64 // bytes/s, math.Inf(1) = unlimited
	paused bool
}

func newPausable(lim *throttle.Limiter) *pausable { return &pausable{lim: lim, want: lim.Rate()} }

// SetRate implements loop.RateSetter.
func (p *pausable) SetRate(v float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.want = v
	if !p.paused {
		p.lim.SetRate(v)
	}
}

// setPaused pauses or resumes.
func (p *pausable) setPaused(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = on
	if on {
		p.lim.SetRate(0)
	} else {
		p.lim.SetRate(p.want)
	}
}

// state returns whether it is paused and the rate asked for last.
func (p *pausable) state() (paused bool, want float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused, p.want
}

// pauseable reports whether a migration in phase ph may be paused: only
// while it copies (PREPARE, SNAPSHOT). Later phases stream WAL under the
// same throttle, and a paused stream would keep the lag from closing and a
// handover from finishing.
func pauseable(ph migration.Phase) bool {
	return ph == migration.PhasePrepare || ph == migration.PhaseSnapshot
}

// setPaused pauses (rate 0: the copy waits; the tenant serves as before
// from the source, whose slot keeps the WAL written meanwhile) or resumes a
// running source-side migration. A migration whose copy ends while paused
// is resumed by its driver (launch).
func (r *run) setPaused(on bool) {
	r.send.setPaused(on)
	r.prefetch.setPaused(on)
}

// autoResume resumes a paused run whose phase ph no longer copies.
func (r *run) autoResume(ph migration.Phase) bool {
	if paused, _ := r.send.state(); paused && !pauseable(ph) {
		r.setPaused(false)
		return true
	}
	return false
}

// PauseMigration pauses (on) or resumes a running migration of this
// agent. Pausing is refused outside the copy (pauseable); resuming a
// migration that is not paused changes nothing.
func (a *Agent) PauseMigration(id string, on bool) (client.Migration, error) {
	r, err := a.sourceRun(id)
	if err != nil {
		return client.Migration{}, err
	}
	r.mu.Lock()
	ph := r.prog.Phase
	r.mu.Unlock()
	if on && !pauseable(ph) {
		return client.Migration{}, errf(http.StatusConflict, "migration %s is in %s; only its copy (prepare, snapshot) can be paused", id, ph)
	}
	r.setPaused(on)
	verb := "resumed"
	if on {
		verb = "paused"
	}
	a.log.Info("migration "+verb, "migration", id, "phase", ph)
	return a.Migration(id)
}

// sourceRun returns the run of source-side migration id, or the API's
// error: 404 unknown, 409 driven by the peer or not running.
func (a *Agent) sourceRun(id string) (*run, error) {
	m, err := a.cat.Migration(id)
	if err != nil {
		return nil, errf(http.StatusNotFound, "unknown migration %q on agent %s", id, a.cfg.Name)
	}
	if m.Role != catalog.Source {
		return nil, errf(http.StatusConflict, "migration %s is driven by its source agent %s; act on it there", id, m.Peer)
	}
	r := a.mig.get(id)
	if r == nil || m.Done {
		return nil, errf(http.StatusConflict, "migration %s is not running", id)
	}
	return r, nil
}
