// Package migration moves one PostgreSQL tenant (a postmaster and its data
// directory) from a source server to a target server, live or by
// stop-and-copy, as a persisted state machine.
//
// The core is pure (etcd raft's style): Step(record, event, now) returns the
// new Record and the next Action; it never touches a disk, a socket or a
// clock. The driver Run executes actions against three interfaces — Source
// (the tenant's running PostgreSQL, local to the driver), Target (the new
// server; the agent serves it over HTTP) and Router (the proxy) — persisting
// the record after every transition (see below), so an agent that dies
// mid-migration resumes (event Resumed) or rolls back. The interfaces hold
// everything the driver may ask for; what an implementation cannot do it
// answers with ErrUnsupported, and the driver goes without (each method says
// how). Package migration/pg implements Source and Target on PostgreSQL;
// this package imports no adapter.
//
// Live migration (DESIGN.md §4, Slacker's snapshot–catch-up–handover with the
// buffer-cache idea of "DBMS-aware VM live migration"):
//
//	PREPARE   target reserves a directory and port; source creates a physical slot
//	SNAPSHOT  hot copy (backup start/stop) streamed through the rate limiter
//	CATCH-UP  target runs as a streaming standby on the slot; lag in bytes
//	WARM      the source's pg_buffercache block list is prewarmed on the target;
//	          with a proxy, the source admits only the proxy's addresses (early fence)
//	HANDOVER  hold, read flush LSN, fence, wait replay, promote, switch, release
//	CLEANUP   source retired, slot dropped, target committed
//
// The early fence (Source.FenceEarly, Router.Backends) moves the fence's
// configuration reload, most of a fence on a small server, out of the
// freeze: inside it the fence only terminates the backends the proxy does
// not hold and flushes the WAL, then completes in the background while the
// target promotes. Run persists every transition except CATCH-UP lag
// reports that change nothing else (at most every Env.LagPersistEvery).
//
// Validate/Preflight reject bad requests before anything changes.
//
// The freeze (hold → release) is dominated by the promotion, and a promotion
// in PostgreSQL 15 copies the last WAL segment to the new timeline, writing
// (and fsyncing) a whole segment: with 1 MiB segments (initdb
// --wal-segsize=1) the freeze is about half what it is with the default 16
// MiB (docs/results.md). Tenants created for live migration should use small
// WAL segments.
package migration
