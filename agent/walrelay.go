package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/migration/pg"
)

// WAL relay placement (client.StartMigration.WALRelay). The standby's WAL
// stream of CATCH-UP is paced by a relay (pg.WALRelay); where it runs
// decides whose CPU pays for it (client.WALRelayTarget, the default, or
// client.WALRelaySource). On the source agent, the relay and the
// walsender both cost the source — the server the migration must protect —
// and the relay's two copy loops can take nearly half the agent's CPU
// (docs/results.md). On the target agent, the walsender's stream goes
// straight to the target's relay, TCP's flow control paces the walsender,
// and the relay costs the target.
// targetRelay is a WAL relay a target agent runs in front of a migration's
// standby, paced at the rate its source agent last pushed.
type targetRelay struct {
	relay *pg.WALRelay
	rate  atomic.Uint64 // math.Float64bits of bytes/s
	id    int64         // paceWALResponse.Relay: when it started, Unix ns
}

// targetRelays are the WAL relays of the migrations this agent is the target
// of, by migration id.
type targetRelays struct {
	mu sync.Mutex
	m  map[string]*targetRelay
}

// startTargetRelay starts (or finds) migration mid's relay towards the
// source postmaster named by primaryConnInfo, paced at rate bytes/s, and
// returns the conninfo the standby must use instead (the relay's address).
// A relay already running for mid is re-aimed only if the source moved.
func (a *Agent) startTargetRelay(mid, primaryConnInfo string, rate float64) (string, error) {
	src, err := connInfoAddr(primaryConnInfo)
	if err != nil {
		return "", err
	}
	rs := &a.relays
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.m == nil {
		rs.m = map[string]*targetRelay{}
	}
	tr := rs.m[mid]
	if tr != nil && tr.relay.Target() != src {
		tr.relay.Close()
		tr = nil
	}
	if tr == nil {
		tr = &targetRelay{id: time.Now().UnixNano()}
		tr.rate.Store(math.Float64bits(rate))
		r, err := pg.StartWALRelay("127.0.0.1", src, func() float64 { return math.Float64frombits(tr.rate.Load()) })
		if err != nil {
			return "", err
		}
		tr.relay = r
		rs.m[mid] = tr
	} else {
		tr.rate.Store(math.Float64bits(rate))
	}
	host, port := tr.relay.Addr()
	return withConnInfoAddr(primaryConnInfo, host, port), nil
}

// streamEarlyWAL starts migration rec's relay towards the source postmaster
// primaryConnInfo names and, through it, a receiver of the WAL the source
// writes during the copy (pg.LocalTarget.StreamWAL).
func (a *Agent) streamEarlyWAL(rec migration.Record, primaryConnInfo string) error {
	ci, err := a.startTargetRelay(rec.ID, primaryConnInfo, 0)
	if err != nil {
		return err
	}
	if err := a.keepWALSource(rec.ID, primaryConnInfo); err != nil {
		return err
	}
	return a.localTarget().(agentTarget).StreamWAL(rec, ci, rec.Slot)
}

// adoptedWAL records what a standby took from its early WAL
// (pg.LocalTarget.OnAdoptWAL).
func (a *Agent) adoptedWAL(m migration.Record, segments int, bytes int64) {
	a.log.Info("early WAL adopted", "migration", m.ID, "segments", segments, "bytes", bytes)
	err := a.cat.Update(func(tx *catalog.Tx) error {
		cm, err := tx.Migration(m.ID)
		if err != nil {
			return err
		}
		cm.WALEarly += bytes
		return tx.PutMigration(cm)
	})
	if err != nil {
		a.log.Warn("early WAL: recording it", "migration", m.ID, "err", err)
	}
}

// keepWALSource records in the catalog the conninfo migration mid's relay
// dials (catalog.Migration.WALSource), so that a restarted agent can
// re-create the relay (resumeTargetRelays). The catalog gets it without
// its password, which goes to a file of its own (walSecretPath, mode 0600):
// no password is kept in the catalog in clear.
func (a *Agent) keepWALSource(mid, primaryConnInfo string) error {
	ci, pw := splitPassword(primaryConnInfo)
	if pw != "" {
		if err := os.MkdirAll(filepath.Dir(a.walSecretPath(mid)), 0o700); err != nil {
			return fmt.Errorf("agent: WAL source secret: %w", err)
		}
		if err := os.WriteFile(a.walSecretPath(mid), []byte(pw+"\n"), 0o600); err != nil {
			return fmt.Errorf("agent: WAL source secret: %w", err)
		}
	}
	return a.cat.Update(func(tx *catalog.Tx) error {
		m, err := tx.Migration(mid)
		if err != nil || m.WALSource == ci {
			return err
		}
		m.WALSource = ci
		return tx.PutMigration(m)
	})
}

// walSecretPath is where keepWALSource keeps the password of migration
// mid's WAL source: <root>/secrets/wal-<mid>.
func (a *Agent) walSecretPath(mid string) string {
	return filepath.Join(a.cfg.Root, "secrets", "wal-"+filepath.Base(mid))
}

// walSource returns migration cm's WAL source conninfo with its password
// put back (as far as its secret file still holds it).
func (a *Agent) walSource(cm catalog.Migration) string {
	b, err := os.ReadFile(a.walSecretPath(cm.ID))
	if pw := strings.TrimSpace(string(b)); err == nil && pw != "" {
		return cm.WALSource + " password=" + pw
	}
	return cm.WALSource
}

// splitPassword returns ci without its password field, and the password
// ("" if none). ci is a key=value conninfo as
// migration.Source.PrimaryConnInfo writes it (unquoted values).
func splitPassword(ci string) (rest, password string) {
	fs := strings.Fields(ci)
	out := fs[:0]
	for _, f := range fs {
		if v, ok := strings.CutPrefix(f, "password="); ok {
			password = v
			continue
		}
		out = append(out, f)
	}
	return strings.Join(out, " "), password
}

// resumeTargetRelays re-creates, after a restart, the WAL relays of the
// migrations this agent is the target of in CATCH-UP or WARM: the relay died
// with the agent's process, while the standby, whose postmaster outlives it,
// keeps dialing the dead relay's port. The new relay listens on a new port
// and the standby is pointed at it (pg.LocalTarget.StartStandby: a
// new primary_conninfo and a reload, or a fresh start if it is down). It
// runs at the relay's floor (pg.DefaultWALFloor) until the source's
// next push of the migration's rate (every walPushEvery). Meanwhile the
// source's driver waits through the outage (migration.Env.TargetOutage).
func (a *Agent) resumeTargetRelays(ctx context.Context) {
	ms, err := a.cat.Migrations()
	if err != nil {
		a.log.Error("resume relays: reading catalog", "err", err)
		return
	}
	for _, cm := range ms {
		if cm.Done {
			os.Remove(a.walSecretPath(cm.ID))
		}
		if cm.Done || cm.Role != catalog.Target || cm.WALSource == "" {
			continue
		}
		var rec migration.Record
		if err := json.Unmarshal(cm.Record, &rec); err != nil {
			a.log.Error("resume relays: bad record", "migration", cm.ID, "err", err)
			continue
		}
		if rec.Phase != migration.PhaseCatchUp && rec.Phase != migration.PhaseWarm {
			continue // before the standby, or in a handover the source rolls back
		}
		ci, err := a.startTargetRelay(cm.ID, a.walSource(cm), 0)
		if err == nil {
			err = a.localTarget().StartStandby(ctx, rec, a.standbyConnInfo(ci), rec.Slot)
		}
		if err != nil {
			a.log.Error("resume relays: the standby has no WAL relay; the source rolls the migration back when its wait ends", "migration", cm.ID, "err", err)
			continue
		}
		a.log.Warn("resumed WAL relay", "migration", cm.ID, "phase", rec.Phase, "source", cm.WALSource)
	}
}

// paceTargetRelay sets migration mid's relay's pace (bytes/s; unpaced: full
// speed, see pg.WALRelay.Unpace) and returns the bytes it relayed so
// far and the relay's id (targetRelay.id); ok is false when this agent runs
// no relay for mid.
func (a *Agent) paceTargetRelay(mid string, rate float64, unpaced bool) (relayed, id int64, ok bool) {
	rs := &a.relays
	rs.mu.Lock()
	tr := rs.m[mid]
	rs.mu.Unlock()
	if tr == nil {
		return 0, 0, false
	}
	tr.rate.Store(math.Float64bits(rate))
	tr.relay.Unpace(unpaced)
	return tr.relay.Relayed(), tr.id, true
}

// closeTargetRelay stops migration mid's relay, if any (commit, abort),
// and removes its WAL source's secret.
func (a *Agent) closeTargetRelay(mid string) {
	os.Remove(a.walSecretPath(mid))
	rs := &a.relays
	rs.mu.Lock()
	tr := rs.m[mid]
	delete(rs.m, mid)
	rs.mu.Unlock()
	if tr != nil {
		tr.relay.Close()
	}
}

// closeTargetRelays stops every relay (the agent's Close).
func (a *Agent) closeTargetRelays() {
	rs := &a.relays
	rs.mu.Lock()
	m := rs.m
	rs.m = nil
	rs.mu.Unlock()
	for _, tr := range m {
		tr.relay.Close()
	}
}

// connInfoAddr returns the host:port of a key=value conninfo as
// migration.Source.PrimaryConnInfo writes it (host and port, unquoted).
func connInfoAddr(ci string) (string, error) {
	var host, port string
	for _, f := range strings.Fields(ci) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "host":
			host = v
		case "port":
			port = v
		}
	}
	if host == "" || port == "" || strings.HasPrefix(host, "/") {
		return "", fmt.Errorf("primary_conninfo %q: no TCP host and port to relay", redactConnInfo(ci))
	}
	if _, err := strconv.Atoi(port); err != nil {
		return "", fmt.Errorf("primary_conninfo %q: port: %w", redactConnInfo(ci), err)
	}
	return net.JoinHostPort(host, port), nil
}

// redactConnInfo returns ci with its password, if any, replaced by "***",
// for error messages and logs.
func redactConnInfo(ci string) string {
	fs := strings.Fields(ci)
	for i, f := range fs {
		if strings.HasPrefix(f, "password=") {
			fs[i] = "password=***"
		}
	}
	return strings.Join(fs, " ")
}

// withConnInfoAddr returns ci aimed at host:port (a relay's address):
// libpq connects to hostaddr=host, port=port, and keeps ci's host as the
// name the server's certificate must carry (sslmode=verify-full), since a
// relay passes the TLS session to the source untouched.
func withConnInfoAddr(ci, host string, port int) string {
	fs := strings.Fields(ci)
	out := fs[:0:0]
	for _, f := range fs {
		k, _, _ := strings.Cut(f, "=")
		switch k {
		case "hostaddr":
			continue
		case "port":
			f = "port=" + strconv.Itoa(port)
		}
		out = append(out, f)
		if k == "host" {
			out = append(out, "hostaddr="+host)
		}
	}
	return strings.Join(out, " ")
}
