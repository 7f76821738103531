package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
)

// slacker is the single-tenant driver: Slacker's transactional YCSB over
// one connection per worker to cfg.DSN, each writing transaction also
// inserting its ledger id into sluice_ledger.
type slacker struct {
	cfg    Config
	ledger *Ledger
	epoch  int64 // this run's ledger epoch: ids are epoch<<48 | worker<<36 | seq
	conns  []*pgx.Conn
	keys   []KeyChooser
}

var _ driver = (*slacker)(nil)

func (d *slacker) open(ctx context.Context, workers int) error {
	d.conns = make([]*pgx.Conn, workers)
	d.keys = make([]KeyChooser, workers)
	for i := range d.conns {
		c, err := pgx.Connect(ctx, d.cfg.DSN)
		if err != nil {
			d.close()
			return fmt.Errorf("workload: connect: %w", err)
		}
		d.conns[i] = c
		d.keys[i], _ = NewKeyChooser(d.cfg.Distribution, d.cfg.Records)
	}
	// Ledger ids must not collide with those of earlier runs on the same
	// table: this run's epoch is one above the highest recorded.
	if err := d.conns[0].QueryRow(ctx, "SELECT coalesce(max(id) >> 48, 0) + 1 FROM "+LedgerTable).Scan(&d.epoch); err != nil {
		d.close()
		return fmt.Errorf("workload: ledger epoch: %w", err)
	}
	return nil
}

func (d *slacker) close() {
	for i, c := range d.conns {
		if c != nil {
			c.Close(context.Background())
			d.conns[i] = nil
		}
	}
}

func (d *slacker) txn(ctx context.Context, w *workerState) error {
	conn := d.conns[w.id]
	if conn == nil || conn.IsClosed() {
		c, err := reconnect(ctx, d.cfg.DSN)
		if err != nil {
			return err
		}
		conn, d.conns[w.id] = c, c
	}
	ledgerID := d.epoch<<48 | int64(w.id+1)<<36 | w.seq
	wrote, err := d.transaction(ctx, conn, w.rng, d.keys[w.id], ledgerID)
	if err == nil && wrote {
		d.ledger.add(ledgerID)
	}
	return err
}

func reconnect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	var err error
	for i := 0; i < 50 && ctx.Err() == nil; i++ {
		var c *pgx.Conn
		if c, err = pgx.Connect(ctx, dsn); err == nil {
			return c, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, fmt.Errorf("workload: reconnect: %w", err)
}

var (
	readSQL   string
	updateSQL [Fields]string
)

func init() {
	readSQL = "SELECT field0, field1, field2, field3, field4, field5, field6, field7, field8, field9 FROM " + Table + " WHERE ycsb_key = $1"
	for i := range updateSQL {
		updateSQL[i] = fmt.Sprintf("UPDATE %s SET field%d = $2 WHERE ycsb_key = $1", Table, i)
	}
}

// transaction runs one YCSB transaction; wrote reports whether it updated
// (and so inserted ledgerID). A failed transaction is rolled back.
func (d *slacker) transaction(ctx context.Context, conn *pgx.Conn, rng *rand.Rand, keys KeyChooser, ledgerID int64) (wrote bool, err error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil {
			tx.Rollback(context.Background())
		}
	}()
	var f [Fields]string
	var val [FieldBytes]byte
	for op := 0; op < d.cfg.OpsPerTx; op++ {
		key := keys.Next(rng)
		if rng.Float64() < d.cfg.ReadFraction {
			err = tx.QueryRow(ctx, readSQL, key).Scan(&f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8], &f[9])
			if errors.Is(err, pgx.ErrNoRows) {
				err = nil
			}
		} else {
			fillValue(rng, val[:])
			_, err = tx.Exec(ctx, updateSQL[rng.IntN(Fields)], key, string(val[:]))
			wrote = true
		}
		if err != nil {
			return false, err
		}
	}
	if wrote {
		if _, err = tx.Exec(ctx, "INSERT INTO "+LedgerTable+" (id) VALUES ($1)", ledgerID); err != nil {
			return false, err
		}
	}
	if err = tx.Commit(ctx); err != nil {
		return false, err
	}
	return wrote, nil
}
