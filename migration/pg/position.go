package pg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sluicedb/sluice/migration"
)

// ConsistencyRetry is how long Position waits, after a standby refused a
// connection as not yet consistent, before it tries again. Each refused
// attempt forks a backend on the target and logs a FATAL; CATCH-UP polls
// every CatchUpPoll, and a standby can take minutes to become consistent
// after a long snapshot.
const ConsistencyRetry = time.Second

const positionSQL = "SELECT coalesce(pg_last_wal_receive_lsn(), '0/0')::text, coalesce(pg_last_wal_replay_lsn(), '0/0')::text, pg_is_in_recovery()"

func scanPosition(row pgx.Row) (migration.Position, error) {
	var p migration.Position
	var rcv, rpl string
	if err := row.Scan(&rcv, &rpl, &p.InRecovery); err != nil {
		return p, err
	}
	var err error
	if p.Receive, err = migration.ParseLSN(rcv); err != nil {
		return p, err
	}
	p.Replay, err = migration.ParseLSN(rpl)
	return p, err
}

// Position reports the standby's receive and replay LSNs.
// A standby that is not yet consistent reports InRecovery and no LSNs; after
// it refused a connection, Position does not ask again for ConsistencyRetry.
func (t *LocalTarget) Position(ctx context.Context, m migration.Record) (migration.Position, error) {
	t.mu.Lock()
	wait := time.Now().Before(t.notReady[m.ID])
	t.mu.Unlock()
	if wait {
		return migration.Position{InRecovery: true}, nil
	}
	var p migration.Position
	err := t.withConn(ctx, m, func(c *pgx.Conn) error {
		var err error
		p, err = scanPosition(c.QueryRow(ctx, positionSQL))
		return err
	})
	if err != nil {
		if notYetConsistent(err) {
			t.mu.Lock()
			if t.notReady == nil {
				t.notReady = map[string]time.Time{}
			}
			t.notReady[m.ID] = time.Now().Add(ConsistencyRetry)
			t.mu.Unlock()
			return migration.Position{InRecovery: true}, nil
		}
		return p, fmt.Errorf("migration: target position: %w", err)
	}
	return p, nil
}

// notYetConsistent reports whether err is a standby refusing connections
// because it has not reached a consistent state yet (SQLSTATE 57P03,
// "the database system is not yet accepting connections").
func notYetConsistent(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "57P03"
}

// WaitReplay polls the replay LSN every PollInterval until it reaches lsn.
func (t *LocalTarget) WaitReplay(ctx context.Context, m migration.Record, lsn migration.LSN) (migration.LSN, error) {
	var got migration.LSN
	err := t.withConn(ctx, m, func(c *pgx.Conn) error {
		for {
			p, err := scanPosition(c.QueryRow(ctx, positionSQL))
			if err != nil {
				return err
			}
			got = p.Replay
			if got >= lsn {
				return nil
			}
			if !p.InRecovery {
				return fmt.Errorf("target is not in recovery at %s", got)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(t.poll()):
			}
		}
	})
	if err != nil {
		return got, fmt.Errorf("migration: wait replay %s (at %s): %w", lsn, got, err)
	}
	return got, nil
}
