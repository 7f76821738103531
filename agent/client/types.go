package client

import (
	"encoding/json"
	"time"
)

// Tenant is a tenant as the agent API shows it. The first six fields are what
// the proxy routes by; keep them stable.
type Tenant struct {
	ID       int64  `json:"id"`
	Name     string `json:"name"`
	Host     string `json:"host"`     // address clients connect to
	Port     int    `json:"port"`     // postmaster port (base_port + id)
	Database string `json:"database"` // default database
	State    string `json:"state"`    // catalog lifecycle state: creating, running, stopped, migrating-out, migrating-in, moved, deleted

	Alive     bool              `json:"alive"` // postmaster process is up right now
	Dir       string            `json:"dir"`
	Settings  map[string]string `json:"settings,omitempty"`
	Migration string            `json:"migration,omitempty"` // migration moving it in or out
	// ServedAt is host:port of the tenant's writable copy when that is not
	// this agent's postmaster: a migration out has switched the route to its
	// target and not finished yet. A router that rebuilds its routes from
	// the catalogs (a restarted proxy) routes the tenant there.
	ServedAt string `json:"served_at,omitempty"`
	// Held says that a migration out is in its handover, between the hold
	// and the release: a router must hold the tenant's new transactions
	// until the agent releases them. A router that restarted mid-handover
	// learns it here (a write reaching the source between the hold and the
	// fence could be lost).
	Held    bool      `json:"held,omitempty"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

// CreateTenant is the body of POST /v1/tenants.
type CreateTenant struct {
	ID       int64             `json:"id,omitempty"` // 0: the agent picks max+1
	Name     string            `json:"name,omitempty"`
	Settings map[string]string `json:"settings,omitempty"` // override the agent's tenant defaults
	// Users become the tenant's login roles, in order: not superusers, each
	// with its password (plaintext or a SCRAM-SHA-256 secret, as in the
	// proxy's userlist); the first owns the tenant's database. None: only
	// the agent can log in (over the tenant's Unix socket).
	Users []User `json:"users,omitempty"`
}

// User is a tenant login role and its password.
type User struct {
	Name     string `json:"name"`
	Password string `json:"password"`
}

// Info is GET /v1/info: what preflight checks need to know about an agent.
type Info struct {
	Name          string            `json:"name"`
	URL           string            `json:"url"`
	PGVersion     string            `json:"pg_version"`            // e.g. "15.14"
	PGMajor       int               `json:"pg_major"`              // e.g. 15
	WalLevel      string            `json:"wal_level"`             // wal_level new tenants get
	FreeBytes     int64             `json:"free_bytes"`            // space available for new tenant data
	UsedBytes     int64             `json:"used_bytes"`            // bytes under the tenants directory
	CapacityBytes int64             `json:"capacity_bytes"`        // configured cap; 0 = the filesystem's
	ContractMs    float64           `json:"contract_ms,omitempty"` // the plans' default contract for its tenants, ms; 0 = plan.DefaultContractMs
	Tenants       int               `json:"tenants"`               // tenants not deleted or moved
	Peers         map[string]string `json:"peers,omitempty"`
}

// StartMigration is the body of POST /v1/migrations on the source agent.
type StartMigration struct {
	Tenant int64   `json:"tenant"`
	To     string  `json:"to"`             // peer name from the agent's config, or a URL
	Rate   float64 `json:"rate,omitempty"` // bytes/s; 0 = unlimited
	Mode   string  `json:"mode,omitempty"` // "live" (default) or "stop-and-copy"
	// CatchUpTimeout is how long catch-up may take before the migration
	// rolls back, a duration such as "30m" (default 10m).
	CatchUpTimeout string `json:"catch_up_timeout,omitempty"`
	// Checkpoint is how the snapshot's checkpoint is taken: "fast" (the
	// default: every dirty buffer written at once), "spread" (the source
	// server's own pacing, minutes by default) or a pace such as "3s": its
	// writes spread over about that long, up to 27s.
	Checkpoint string `json:"checkpoint,omitempty"`
	// WALRelay is where the standby's WAL stream of catch-up is relayed and
	// paced: "target" (the default: the target agent, so that relaying costs
	// the target's CPU, not the source's) or "source" (the source agent).
	WALRelay string `json:"wal_relay,omitempty"`
	// HoldDeadline is how long the handover's hold lets the tenant's open
	// transactions finish before the proxy ends them (FATAL 57P01, or a
	// cancel), a duration such as "100ms" from 0 to 1m; every client of
	// the tenant may wait that long. "" = migration.DefaultHoldDeadline.
	HoldDeadline string `json:"hold_deadline,omitempty"`
	// Deadline, when set, is how long the migration may run before it
	// rolls back, a duration such as "2h": past it, a migration that has
	// not switched its route is aborted and the source serves on as if
	// nothing happened. "" = none.
	Deadline string `json:"deadline,omitempty"`
	// Control, if set, runs a control loop in the source agent that sets the
	// rate every step from the latency the proxy measures.
	Control *Control `json:"control,omitempty"`
}

// Progress is a migration's live figures.
type Progress struct {
	Phase      string  `json:"phase"`
	Action     string  `json:"action,omitempty"` // what the driver is doing now; "checkpoint paced 3s" (fast, spread) while the snapshot waits for the source's checkpoint
	Bytes      int64   `json:"bytes"`            // bytes of the phase that counts them (snapshot: sent; warm: reloaded), else moved so far
	TotalBytes int64   `json:"total_bytes"`      // that phase's estimated total; 0 = unknown or a phase without one
	Rate       float64 `json:"rate"`             // measured send rate, bytes/s: the copy's so far; in catch-up, the WAL shipped since it began
	Limit      float64 `json:"limit"`            // current throttle, bytes/s; 0 = unlimited
	ETASeconds float64 `json:"eta_seconds"`      // -1 = unknown
	LagBytes   int64   `json:"lag_bytes"`        // WAL the target still has to replay; -1 = unknown
	Elapsed    float64 `json:"elapsed_seconds"`
	// Paused says that an operator paused the copy (POST …/pause): it
	// waits at rate 0 until resumed; Limit is the rate it resumes at.
	Paused bool `json:"paused,omitempty"`
	// Warning, when set, says that catch-up will not end before its
	// timeout rolls the migration back at the lag's pace (one line).
	Warning string `json:"warning,omitempty"`
	// Waiting, when set, says which step keeps failing and is being retried
	// (a rollback or roll-forward that needs a peer, the proxy or a disk),
	// since when and its last error (one line).
	Waiting string `json:"waiting,omitempty"`
	// Set while a control loop runs (StartMigration.Control):
	Controller string  `json:"controller,omitempty"`
	Profile    string  `json:"profile,omitempty"`     // the loop's profile and its changes, e.g. "sluice" or "sluice(ki=0.1)"
	LatencyMs  float64 `json:"latency_ms,omitempty"`  // the loop's last process variable; -1 = no data
	SetpointMs float64 `json:"setpoint_ms,omitempty"` // the loop's target
	MaxRate    float64 `json:"max_rate,omitempty"`    // the loop's top speed, bytes/s
	// ReserveMsS is the PID's handover reserve, ms·s, learned from the
	// proxy's measured handovers (control.Profile.LearnReserve).
	ReserveMsS float64 `json:"handover_reserve_ms_s,omitempty"`
	// CPUThrottledPct is the share (%) of the source server's CPU quota
	// periods in the loop's last step in which its cgroup was throttled
	// (agent config cpu_stat); absent when not measured.
	CPUThrottledPct *float64 `json:"cpu_throttled_pct,omitempty"`
}

// Migration is GET /v1/migrations/{id}.
type Migration struct {
	ID       string          `json:"id"`
	Tenant   int64           `json:"tenant"`
	Role     string          `json:"role"` // source or target
	Peer     string          `json:"peer"`
	PeerURL  string          `json:"peer_url"`
	Mode     string          `json:"mode"`
	Done     bool            `json:"done"`
	Outcome  string          `json:"outcome,omitempty"` // committed, aborted
	Error    string          `json:"error,omitempty"`
	Progress Progress        `json:"progress"`
	Summary  *Summary        `json:"summary,omitempty"` // set when done
	Record   json.RawMessage `json:"record,omitempty"`  // the migration package's persisted record
	// WALEarlyBytes, on the target, is the WAL it received while the
	// snapshot ran and its standby then replayed from its own disk instead
	// of streaming it in CATCH-UP (migration.LocalTarget.StreamWAL), bytes
	// in whole segments; 0 none.
	WALEarlyBytes int64     `json:"wal_early_bytes,omitempty"`
	Created       time.Time `json:"created"`
	Updated       time.Time `json:"updated"`
}

// Summary is a finished migration's figures.
type Summary struct {
	Outcome string `json:"outcome"`
	// Bytes is what the snapshot and the copy moved; for an aborted
	// migration, what its snapshot had sent before the rollback.
	Bytes      int64   `json:"bytes"`
	Seconds    float64 `json:"seconds"`
	FreezeMS   float64 `json:"freeze_ms"`   // writes held at handover (live) — the client-visible pause
	DowntimeMS float64 `json:"downtime_ms"` // tenant unavailable (stop-and-copy)
	// Checkpoint says how the live snapshot's checkpoint was taken on the
	// source ("fast", "spread", "paced 3s", or a fallback with its reason);
	// CheckpointSeconds how long the backup's start, that checkpoint, took.
	// Empty for stop-and-copy.
	Checkpoint        string  `json:"checkpoint,omitempty"`
	CheckpointSeconds float64 `json:"checkpoint_seconds,omitempty"`
	// WALRelay says where the standby's WAL stream was relayed and paced
	// ("target" or "source", StartMigration.WALRelay), WALBytes how much it
	// passed (a target's relay counts up to the handover's hold, and also
	// the WAL it received during the copy, the early WAL). Empty for
	// stop-and-copy.
	WALRelay string `json:"wal_relay,omitempty"`
	WALBytes int64  `json:"wal_relayed_bytes,omitempty"`
}

// StartMigration.WALRelay's values.
const (
	WALRelayTarget = "target" // the target agent relays (the default)
	WALRelaySource = "source" // the source agent relays
)

// SetRate is the body of POST /v1/migrations/{id}/rate.
type SetRate struct {
	Rate float64 `json:"rate"` // bytes/s; 0 = unlimited
}

// Error is every error response's body.
type Error struct {
	Error string `json:"error"`
}
