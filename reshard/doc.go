// Package reshard is the pure core of a keyspace's live reconfiguration
// (the Squall paper §3–6; shared/DESIGN.md §5): a new partition plan is
// diffed against the current one (keyspace.Diff), the moves are cut into
// chunks, and the Tracker follows every chunk while data moves from its
// old owner to its new one. It does no I/O: the agent pulls chunks and
// persists, the proxy holds the transactions that wait (package agent,
// package proxy).
//
// # Ownership
//
// A reconfiguration runs in three steps, and at every instant each key
// has at most one partition that accepts a write to it:
//
//   - prepare: every destination refuses writes to the keys it will
//     receive (an incoming fence); the sources still own them;
//   - switch: every source refuses writes to the keys it gives away (an
//     outgoing fence) and routers start sending those keys to their new
//     owner; nobody accepts a write to a moving key yet;
//   - pull: a chunk is copied from its source, in one snapshot, into its
//     destination, whose transaction also drops the chunk's incoming
//     fence: the chunk is Complete exactly when that transaction has
//     committed, so the destination durably records its own progress.
//
// A chunk is NotStarted, Partial (a pull in flight; a crash sends it back
// to NotStarted and the pull is redone: the fence row the destination
// locks makes a repeated pull a no-op) or Complete. A transaction that
// needs a key of a chunk not yet Complete waits for that chunk's pull (a
// reactive pull, Route); the rest is pulled asynchronously in sub-plan
// order (Next), paced by the caller. Once a chunk is Complete its rows are
// deleted from the source in batches (Cleaned); when every chunk is
// Complete and Cleaned the reconfiguration is over.
//
// # Chunks
//
// Chunks (Plan) follows Squall §4: a move larger than Options.ChunkBytes
// is split at bounds of the source's pg_stats histogram (Stats), moves of
// the same root, source and destination of at most half a chunk are merged
// into one chunk, and chunks are grouped into sub-plans in which no source
// sends to more than one destination.
package reshard
