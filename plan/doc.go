// Package plan is the pure core of a migration plan (Aqueduct, Lu et al.,
// FAST 2002): many tenant and key-range moves, run a few at a time under
// one control loop that holds every store's latency under its contract.
// No clocks, no I/O, no goroutines: time and measurements arrive as
// arguments, and the agent (agent/plan*.go) does what Step returns.
//
// # Model
//
// A Spec is what the operator writes (JSON or YAML, Parse): moves (tenant T
// from agent A to agent B), optional per-store latency contracts LC_i (ms,
// by tenant name), the sub-move size and the method. Validate checks it
// against an Inventory (the agents, their tenants and each agent's default
// contract) in one place and returns a Plan: the moves resolved, and every
// store — every tenant of every server the plan touches, moving or not —
// with its contract (its own, else its server's default, else
// DefaultContractMs).
//
// A move may instead move a key range of a keyspace (Squall's
// reconfiguration, package reshard) to another partition: the keys [lo,hi)
// of a root table, from the one partition that owns them to partition To.
// Validate checks each against the keyspace as the plan's earlier moves
// leave it, and resolves both partitions to their tenants and agents: the
// move's servers (From, To) are theirs, and their tenants are stores like
// any. The agent holding the keyspace runs it as a reconfiguration to the
// plan keyspace.Assign writes, paced by the plan's controller like a
// tenant's snapshot (reshard's method paced); a keyspace's key-range moves
// run one at a time, in the plan's order.
//
// # Sub-moves
//
// A tenant move is one snapshot stream (package transfer) followed by
// catch-up and a sub-second handover. Its sub-moves are SubMoveBytes (32 MB,
// Aqueduct's size) units of that stream: the plan's rate R is handed to the
// running moves' stream limiters (a share each, Shares), which pace every
// byte, so a 32 MB unit never bursts at line speed and then sleeps.
// Aqueduct's actuator (throttle.Delay: sleep W/R − T_j between sub-moves)
// is the same rate over a sub-move; a byte-rate limiter reaches it without
// the burst, and changes within a step when the controller does. Progress,
// rates and ETAs are counted in bytes; SubMoves gives the count.
//
// # Schedule
//
// Step runs several moves at once where they share no server, and at most
// one move per server (as source or target): a server streams one tenant
// at a time, so no server carries two copies' load. Among the pending moves
// that fit, Order prefers (1) moves out of a server that other pending
// moves will fill (make room before filling), (2) the largest (longest
// processing time first: the plan's length is its longest chain), (3) the
// plan's order. Aqueduct runs its plan's moves one after another; this is
// the same plan with independent servers working in parallel.
//
// # State
//
// A Plan is a plain value the agent persists (catalog bucket plans) after
// every Step. Each move is pending, running (with the source agent's
// migration ID), done or failed; a move whose migration rolled back is
// pending again until MaxAttempts. The plan is running, paused, done,
// failed (some move failed, the rest finished) or aborted; Settled says
// when its driver is done with it (an aborted plan's running moves are
// followed until they have rolled back). A driver that restarts feeds
// Resumed: running moves keep their migrations, which their source agents
// resume on their own.
//
// # Control
//
// Controller and Observe are the plan's control loop on the worst store
// (control.Integral on min_i P·LC_i − L_i, or the PID on latencies scaled
// to the tightest contract); Shares splits its rate among the moves
// copying. The agent steps it only while a move copies, and Observe holds it
// while a move settles.
package plan
