package workload

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicedb/sluice/keyspace"
)

// ycsbLedger remembers a YCSB run's writes: per field of a key (a cell),
// the writes that may legally be its final value; per inserted key, its
// writer; per writing transaction, its ledger row. Times are offsets from
// the driver's clock origin. Safe for concurrent use.
//
// A cell's final value must come from an acknowledged write that no other
// acknowledged write began after it was acknowledged (else that later
// write was lost), or from a write whose commit's outcome is unknown; with
// no acknowledged write, the value from before the run may remain.
type ycsbLedger struct {
	mu        sync.Mutex
	cells     map[cell]*cellWrites
	inserts   map[int64]int64 // acknowledged inserted key → writer id
	rows      map[int64]int64 // acknowledged ledger id → its ledger row's key
	uncertain map[int64]bool  // ids whose commit's outcome is unknown
	n         map[string]int64
}

type cell struct {
	key   int64
	field int
}

type cellWrites struct {
	maxBegin time.Duration // latest begin of an acknowledged write; −1 for none
	cands    []cellWrite   // the writes the final value may come from
}

type cellWrite struct {
	id         int64
	begin, ack time.Duration // ack: when COMMIT returned
	acked      bool
}

func newYCSBLedger() *ycsbLedger {
	return &ycsbLedger{cells: map[cell]*cellWrites{}, inserts: map[int64]int64{}, rows: map[int64]int64{},
		uncertain: map[int64]bool{}, n: map[string]int64{}}
}

// record notes transaction id's operations, begun at begin and ended at
// end with err: acknowledged (nil), outcome unknown (ErrCommitUnknown), or
// rolled back (anything else: nothing to remember).
func (l *ycsbLedger) record(id int64, ops []ycsbOp, begin, end time.Duration, err error) {
	acked := err == nil
	if !acked && !errors.Is(err, ErrCommitUnknown) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	first := int64(-1)
	for _, op := range ops {
		switch op.kind {
		case 'u':
			l.cellLocked(cell{op.key, op.field}).add(cellWrite{id: id, begin: begin, ack: end, acked: acked})
		case 'i':
			if acked {
				l.inserts[op.key] = id
			}
		default:
			continue
		}
		if first < 0 {
			first = op.key
		}
		if acked {
			l.n["writes"]++
			l.n[string(op.kind)]++
		}
	}
	switch {
	case first < 0:
		if acked {
			l.n["read_only"]++
		}
	case acked:
		l.rows[id] = first
	default:
		l.uncertain[id] = true
	}
}

func (l *ycsbLedger) cellLocked(c cell) *cellWrites {
	cw := l.cells[c]
	if cw == nil {
		cw = &cellWrites{maxBegin: -1}
		l.cells[c] = cw
	}
	return cw
}

// add takes a write; acknowledged writes that can no longer be the final
// value (one acknowledged later began after they were acknowledged) are dropped.
func (cw *cellWrites) add(w cellWrite) {
	if !w.acked {
		cw.cands = append(cw.cands, w)
		return
	}
	if w.ack < cw.maxBegin {
		return
	}
	if w.begin > cw.maxBegin {
		cw.maxBegin = w.begin
		kept := cw.cands[:0]
		for _, c := range cw.cands {
			if !c.acked || c.ack >= cw.maxBegin {
				kept = append(kept, c)
			}
		}
		cw.cands = kept
	}
	cw.cands = append(cw.cands, w)
}

// legal reports whether a cell may hold the value written by id, given
// the run's epoch (ids of other epochs are from before the run).
func (cw *cellWrites) legal(id, epoch int64) bool {
	if id < 0 {
		return false // not a value any writer wrote
	}
	if id>>48 != epoch {
		return cw.maxBegin < 0
	}
	for _, c := range cw.cands {
		if c.id == id {
			return true
		}
	}
	return false
}

func (l *ycsbLedger) counts() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int64{}
	for k, v := range l.n {
		name := map[string]string{"u": "updates", "i": "inserts"}[k]
		if name == "" {
			name = k
		}
		out[name] = v
	}
	return out
}

// found is one usertable row as read from one partition.
type found struct {
	part   string
	fields [Fields]string
}

// verify checks the ledger against every partition: ledger rows and
// inserted keys on their owner only, every updated field holding a legal
// value, the loaded keys all present, and every table's placement.
func (d *ycsbDriver) verify(ctx context.Context) (Verdict, error) {
	ps, err := openPools(ctx, d.cfg.Partitions, 1)
	if err != nil {
		return Verdict{}, err
	}
	defer ps.close()
	l := d.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	touched := map[int64]bool{}
	for c := range l.cells {
		touched[c.key] = true
	}
	for k := range l.inserts {
		touched[k] = true
	}
	keys := make([]int64, 0, len(touched))
	for k := range touched {
		keys = append(keys, k)
	}
	rows, ids, loaded, err := d.readBack(ctx, ps, keys)
	if err != nil {
		return Verdict{}, fmt.Errorf("workload: ycsb verify: %w", err)
	}
	var v Verdict
	owner := func(k int64) string { o, _ := d.ks.Owner(Table, keyspace.IntKey(k)); return o }
	for id, key := range l.rows {
		v.Acknowledged++
		v.judge(fmt.Sprintf("ledger row %#x (key %d)", id, key), owner(key), ids[id])
	}
	for id := range ids {
		if _, ok := l.rows[id]; !ok {
			v.Unacknowledged++
		}
	}
	for key, id := range l.inserts {
		seen := sightings(rows[key])
		v.Acknowledged++
		v.judge(fmt.Sprintf("inserted key %d", key), owner(key), seen)
		if len(seen) > 0 && valueID(rows[key][0].fields[0]) != id {
			v.Lost++
			v.problem("inserted key %d holds write %#x, not its insert %#x", key, valueID(rows[key][0].fields[0]), id)
		}
	}
	d.judgeCells(&v, rows)
	if loaded != d.cfg.Records {
		v.Lost += max(d.cfg.Records-loaded, 0)
		v.problem("%d distinct loaded keys [0,%d) on the partitions, want %d", loaded, d.cfg.Records, d.cfg.Records)
	}
	v.Placement, err = CheckPlacement(ctx, d.ks, ps)
	return v, err
}

// judgeCells checks every updated field's value; a key found on no
// partition or on several was judged with its ledger row or insert, and is
// judged here by its owner's copy (the first found, else skipped).
func (d *ycsbDriver) judgeCells(v *Verdict, rows map[int64][]found) {
	v.Acknowledged += d.ledger.n["u"]
	cells := make([]cell, 0, len(d.ledger.cells))
	for c := range d.ledger.cells {
		cells = append(cells, c)
	}
	sort.Slice(cells, func(i, j int) bool {
		return cells[i].key < cells[j].key || cells[i].key == cells[j].key && cells[i].field < cells[j].field
	})
	for _, c := range cells {
		cw := d.ledger.cells[c]
		copies := rows[c.key]
		if len(copies) == 0 {
			v.Lost++
			v.problem("key %d: on no partition", c.key)
			continue
		}
		if got := valueID(copies[0].fields[c.field]); !cw.legal(got, d.epoch) {
			v.Lost++
			v.problem("key %d field%d holds write %#x: an acknowledged later write is lost", c.key, c.field, got)
		}
	}
}

// readBack reads, from every partition, the usertable rows of keys, the
// ledger rows of this run's epoch, and the number of loaded keys present.
func (d *ycsbDriver) readBack(ctx context.Context, ps pools, keys []int64) (rows map[int64][]found, ids map[int64]sighting, loaded int64, err error) {
	var mu sync.Mutex
	rows, ids = map[int64][]found{}, map[int64]sighting{}
	err = ps.each(func(part string, p *pgxpool.Pool) error {
		q := "SELECT ycsb_key, field0, field1, field2, field3, field4, field5, field6, field7, field8, field9 FROM " + Table + " WHERE ycsb_key = ANY($1)"
		r, err := p.Query(ctx, q, keys)
		if err != nil {
			return err
		}
		var k int64
		var f found
		f.part = part
		scan := []any{&k}
		for i := range f.fields {
			scan = append(scan, &f.fields[i])
		}
		if _, err := pgx.ForEachRow(r, scan, func() error {
			mu.Lock()
			rows[k] = append(rows[k], f)
			mu.Unlock()
			return nil
		}); err != nil {
			return err
		}
		var id int64
		r, err = p.Query(ctx, "SELECT id FROM "+YCSBLedgerTable+" WHERE id >> 48 = $1", d.epoch)
		if err != nil {
			return err
		}
		if _, err := pgx.ForEachRow(r, []any{&id}, func() error {
			mu.Lock()
			ids[id] = append(ids[id], part)
			mu.Unlock()
			return nil
		}); err != nil {
			return err
		}
		var n int64
		if err := p.QueryRow(ctx, "SELECT count(DISTINCT ycsb_key) FROM "+Table+" WHERE ycsb_key >= 0 AND ycsb_key < $1", d.cfg.Records).Scan(&n); err != nil {
			return err
		}
		mu.Lock()
		loaded += n
		mu.Unlock()
		return nil
	})
	// Put the owner's copy first, so a cell is judged by it.
	for k, fs := range rows {
		o, _ := d.ks.Owner(Table, keyspace.IntKey(k))
		sort.SliceStable(fs, func(i, j int) bool { return fs[i].part == o && fs[j].part != o })
	}
	return rows, ids, loaded, err
}

func sightings(fs []found) sighting {
	var s sighting
	for _, f := range fs {
		s = append(s, f.part)
	}
	return s
}

// valueID is the ledger id a field value starts with; −1 if none.
func valueID(v string) int64 {
	if len(v) < 16 {
		return -1
	}
	id, err := strconv.ParseUint(v[:16], 16, 64)
	if err != nil {
		return -1
	}
	return int64(id)
}
