// Package router is the keyspace router: it serves a client session whose
// database is a keyspace (package keyspace) and sends each of its
// transactions to the partitions that own its keys (the Squall paper §2;
// shared/DESIGN.md §5). The proxy authenticates the client and hands the
// session over (proxy/keyspaces.go); the router opens a server session per
// partition the client uses, as the client's user.
//
// # Finding the key
//
// Every statement is analysed once by PostgreSQL's own parser (package
// router/analyze): its text is the cache key, so a prepared statement is
// parsed once and a repeated simple query too. The key comes from
// equalities, IN lists and = ANY(array) on a sharded table's key column
// (an array parameter in text or binary form, ARRAY[…], '{…}'), INSERT
// values, and Bind parameters in text or binary; a statement runs on the
// owners of all its keys, as a scatter when it reads several partitions. Hints when the statement names
// none: SET sluice.key = v (for the transaction; RESET clears it) or a
// leading comment /* sluice.key=v */. A statement on a sharded table with
// neither is refused with SQLSTATE 0A000 naming the table and column; a key
// of the wrong type with 22P02; a key outside the plan with 22023.
// Statements that name no keyspace table (catalog queries, SELECT 1, SHOW)
// and reads of reference tables run on the transaction's first partition,
// else the session's home (the keyspace's first partition); a write to a
// reference table runs on every partition.
//
// # Transactions
//
// BEGIN is answered by the router and sent on to each partition when the
// block first reaches it. A block that wrote on one partition commits
// there; one that wrote on several commits with two-phase commit
// (Coordinator: PREPARE TRANSACTION everywhere, the decision fsynced in the
// decision log (package router/txlog), COMMIT PREPARED; in-doubt
// transactions resolved after a crash by Recover). A keyspace with NoTwoPC
// refuses the statement that would make a second partition write (0A000),
// the block goes on. A write on several partitions outside a block (UPDATE
// … WHERE k IN (1, 500)) runs in a block of the router's own, committed
// the same way. ROLLBACK rolls back every partition. No server sees a
// deadlock between two transactions that span partitions, so from its
// second partition on a transaction's lock waits are bounded by
// spanLockTimeout (SET LOCAL lock_timeout): the loser gets 55P03.
//
// # Reads over several partitions
//
// A read whose keys (an IN list, a range k >= a AND k < b) span partitions
// is sent to each owner at once and the answers merged: rows concatenated,
// in key order when the statement orders by its key column (the
// RowDescription names it), cut again to a constant LIMIT, CommandComplete
// counting them all. Aggregates, GROUP BY and DISTINCT over several
// partitions, and INSERTs whose rows belong to several, are refused (0A000).
//
// # The extended protocol
//
// Parse, Bind, Describe, Execute and Close are kept until Sync (or Flush)
// and sent as one pipeline to the partition the Bind's key names. A
// prepared statement lives on every server session it has been used on:
// the router parses it there when a Bind first needs it (a hidden Parse;
// its ParseComplete is not passed on) and closes a stale version first.
// One pipeline reaches one partition (or, one Bind over several, a
// scatter); a pipeline whose Binds name different partitions is refused
// (0A000): send each partition's statements up to a Sync of their own. A
// pipeline refused at one of its messages is answered as PostgreSQL
// answers one that fails there: the messages before it are answered (and
// their statements exist), then the error (refuse.go). BEGIN, COMMIT,
// ROLLBACK, SAVEPOINT and SET sent as prepared statements (JDBC's way) are
// the router's: answered and acted on at the head of a pipeline or alone,
// refused after other statements in one (control.go).
//
// # Cancel requests
//
// The host registers the session's BackendKeyData and, on a client's
// CancelRequest, sends one to each server session Busy lists: those
// running the client's messages at that moment (every partition of a
// scatter). The router's own work (COMMIT, two-phase commit) is not
// cancelled.
//
// # Handover, timing
//
// Each partition is a database in a tenant the proxy routes: a transaction
// enters the partition's tenant when it first reaches it (waiting while a
// handover holds the tenant) and leaves it at its end, and a server session
// opened for an older route is reopened. The host tells a hold which server
// sessions are between transactions there (the proxy's idle_backends), so
// that the source's fence spares them: the router sends them nothing before
// its next Enter, and reopens them if the tenant moved. A transaction's latency, from its
// first message to its end, goes to the keyspace's window per partition it
// touched (tenant = keyspace name, server = partition name in the proxy's
// /v1/latency) and to each partition tenant's own window.
//
// # Not supported
//
// COPY, function calls (fastpath), multi-statement query
// strings that span partitions, SQL-level PREPARE/EXECUTE, LISTEN/NOTIFY
// across partitions, and DDL on every partition (the schema is applied to
// every partition by `sluice keyspace create`; changing it later is not
// built): utility statements run on the home partition only.
package router
