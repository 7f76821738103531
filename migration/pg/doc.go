// Package pg implements package migration's Source and Target on
// PostgreSQL 15: LocalSource drives the tenant's postmaster on the source's
// host, LocalTarget runs the new one on the target's. They do the I/O the
// driver (migration.Run) asks for and nothing else; the migration's state
// and its order of steps are package migration's.
//
// By concern:
//
//	source.go       LocalSource: its persistent connection, Info, the WAL relay it may run
//	slot.go         the replication slot and the flush LSN
//	backup.go       the hot snapshot (package snapshot) and the cold copy (dirstream.go)
//	buffers.go      the shared-buffer block list (pg_buffercache)
//	fence*.go       the read-only fence, its early part, the stop fence; hba.go edits pg_hba.conf
//	retire.go       the retired directory, its page cache and its paced purge (purge.go)
//	target.go       LocalTarget: reservation, connections, abort and commit
//	receive.go      the snapshot's writer on the target
//	standby.go      the standby's configuration and start
//	earlywal.go     WAL received during the copy (pg_receivewal), adopted by the standby
//	position.go     receive/replay positions and the replay wait
//	prewarm.go      pg_prewarm of the source's block list
//	promotion.go    the new timeline's first segments, and the promotion
//	walrelay.go     the paced TCP relay of the standby's WAL stream
//
// Tests run a real PostgreSQL (internal/pgtest) as the postgres OS user.
package pg
