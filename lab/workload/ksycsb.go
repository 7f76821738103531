package workload

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicedb/sluice/keyspace"
)

// YCSB over a keyspace. usertable is sharded by an integer ycsb_key (not
// YCSB's 'user…' text keys: integers are cheaper to generate, compare and
// route, and a range plan over them is easy to read). Every writing
// transaction also inserts (its first written key, its ledger id) into
// ycsb_ledger, co-partitioned with usertable by that key, so the ledger
// row lives, and must be found, on the partition that owns the key.

// YCSBLedgerTable is the keyspace YCSB's ledger table.
const YCSBLedgerTable = "ycsb_ledger"

// YCSBKeyspace returns the YCSB keyspace named name over parts (at least
// one; their Tenant set): usertable sharded by ycsb_key, ycsb_ledger
// co-partitioned with it, and a plan splitting keys [0, records) evenly
// over parts in the order given (the first range unbounded below, the last
// above, so inserted keys past records have an owner).
func YCSBKeyspace(name string, parts []keyspace.Partition, records int64) (*keyspace.Keyspace, error) {
	if records < int64(len(parts)) {
		return nil, fmt.Errorf("workload: ycsb keyspace: %d records cannot cover %d partitions", records, len(parts))
	}
	ks := &keyspace.Keyspace{
		Name:       name,
		Partitions: parts,
		Tables: []keyspace.Table{
			{Name: Table, Kind: keyspace.Sharded, Column: "ycsb_key", Type: keyspace.Int},
			{Name: YCSBLedgerTable, Kind: keyspace.CoPartitioned, Column: "ycsb_key", Root: Table},
		},
		Schema: ycsbSchema(),
		Plan:   evenPlan(Table, parts, 0, records),
	}
	if err := ks.Validate(); err != nil {
		return nil, err
	}
	return ks, nil
}

func ycsbSchema() string {
	var cols strings.Builder
	for i := 0; i < Fields; i++ {
		fmt.Fprintf(&cols, ", field%d text NOT NULL", i)
	}
	return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (ycsb_key bigint PRIMARY KEY%s);\n", Table, cols.String()) +
		fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (ycsb_key bigint NOT NULL, id bigint NOT NULL);\n", YCSBLedgerTable)
}

// LoadStats reports a keyspace load.
type LoadStats struct {
	Rows    map[string]int64 `json:"rows"` // by table, all partitions together
	Seconds float64          `json:"seconds"`
}

// applySchema runs ks.Schema on every partition and empties its tables.
func applySchema(ctx context.Context, ks *keyspace.Keyspace, ps pools) error {
	names := make([]string, len(ks.Tables))
	for i, t := range ks.Tables {
		names[i] = t.Name
	}
	return ps.each(func(_ string, p *pgxpool.Pool) error {
		if _, err := p.Exec(ctx, ks.Schema); err != nil {
			return fmt.Errorf("schema: %w", err)
		}
		_, err := p.Exec(ctx, "TRUNCATE "+strings.Join(names, ", "))
		return err
	})
}

// LoadYCSB creates ks's schema on every partition (dsns: partition →
// DSN), empties its tables and copies usertable rows [0, records) to their
// owners, field values drawn from seed. Every value starts with sixteen
// zeros: the ledger id of "loaded".
func LoadYCSB(ctx context.Context, ks *keyspace.Keyspace, dsns map[string]string, records int64, seed uint64) (LoadStats, error) {
	start := time.Now()
	ps, err := openPools(ctx, dsns, 1)
	if err != nil {
		return LoadStats{}, err
	}
	defer ps.close()
	if err := applySchema(ctx, ks, ps); err != nil {
		return LoadStats{}, fmt.Errorf("workload: load ycsb: %w", err)
	}
	cols := []string{"ycsb_key"}
	for i := 0; i < Fields; i++ {
		cols = append(cols, fmt.Sprintf("field%d", i))
	}
	var total atomic.Int64
	err = ps.each(func(part string, p *pgxpool.Pool) error {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		var buf [FieldBytes]byte
		var keys []int64
		for k := int64(0); k < records; k++ {
			if o, _ := ks.Owner(Table, keyspace.IntKey(k)); o == part {
				keys = append(keys, k)
			}
		}
		n, err := p.CopyFrom(ctx, pgx.Identifier{Table}, cols, pgx.CopyFromSlice(len(keys), func(i int) ([]any, error) {
			row := make([]any, Fields+1)
			row[0] = keys[i]
			for f := 0; f < Fields; f++ {
				row[f+1] = ycsbValue(rng, 0, buf[:])
			}
			return row, nil
		}))
		total.Add(n)
		if err == nil {
			_, err = p.Exec(ctx, "ANALYZE "+Table)
		}
		return err
	})
	if err != nil {
		return LoadStats{}, fmt.Errorf("workload: load ycsb: %w", err)
	}
	return LoadStats{Rows: map[string]int64{Table: total.Load()}, Seconds: time.Since(start).Seconds()}, nil
}

// ycsbValue is a field value: id as sixteen hex digits, then random text.
func ycsbValue(rng *rand.Rand, id int64, buf []byte) string {
	fillValue(rng, buf)
	copy(buf, fmt.Sprintf("%016x", uint64(id)))
	return string(buf)
}

// YCSBConfig is a YCSB run over a keyspace.
type YCSBConfig struct {
	Arrivals
	Reach
	Keyspace *keyspace.Keyspace
	Records  int64 // loaded keys [0, Records); required
	// OpsPerTx is operations per transaction; 0 means 1 (YCSB's own).
	// Keys are drawn independently, so with several a transaction may span
	// partitions.
	OpsPerTx int
	// ReadFraction is the share of operations that read a whole record;
	// 0 means 0.5 (workload A); 0.95 is workload B.
	ReadFraction float64
	// InsertFraction is the share of the other operations that insert a
	// new key (past every key so far) instead of updating a field.
	InsertFraction float64
	Distribution   Distribution // default zipfian
	// HotMove, for the hotspot distribution, moves the hot set (a fifth of
	// the keys) to the next fifth every HotMove; 0 keeps it still.
	HotMove time.Duration
}

func (c YCSBConfig) withDefaults() (YCSBConfig, error) {
	var err error
	if c.Arrivals, err = c.Arrivals.withDefaults(); err != nil {
		return c, err
	}
	if c.OpsPerTx == 0 {
		c.OpsPerTx = 1
	}
	if c.ReadFraction == 0 {
		c.ReadFraction = 0.5
	}
	if c.Distribution == "" {
		c.Distribution = Zipfian
	}
	switch {
	case c.Keyspace == nil:
		return c, fmt.Errorf("workload: ycsb: no keyspace")
	case c.Records < 1:
		return c, fmt.Errorf("workload: ycsb: records must be ≥ 1, got %d", c.Records)
	case c.OpsPerTx < 1:
		return c, fmt.Errorf("workload: ycsb: ops per transaction must be ≥ 1, got %d", c.OpsPerTx)
	case c.ReadFraction < 0 || c.ReadFraction > 1:
		return c, fmt.Errorf("workload: ycsb: read fraction must be in [0, 1], got %v", c.ReadFraction)
	case c.InsertFraction < 0 || c.InsertFraction > 1:
		return c, fmt.Errorf("workload: ycsb: insert fraction must be in [0, 1], got %v", c.InsertFraction)
	case c.HotMove < 0:
		return c, fmt.Errorf("workload: ycsb: hot-set move period must be ≥ 0, got %v", c.HotMove)
	}
	if _, err := NewKeyChooser(c.Distribution, c.Records); err != nil {
		return c, err
	}
	return c, c.Reach.Validate(c.Keyspace)
}

// KSResult is a keyspace run: the runner's summary, how many transactions
// spanned partitions, counts by transaction type, and the ledger's verdict.
type KSResult struct {
	Workload string `json:"workload"` // "ycsb" or "tpcc"
	Mode     string `json:"mode"`     // "router" or "direct"
	Summary
	// Spanning counts transactions touching more than one partition: sent
	// to the router, or skipped in direct mode (Summary.Skipped).
	Spanning int64 `json:"spanning"`
	// DistributedFraction is Spanning over every transaction drawn.
	DistributedFraction float64 `json:"distributed_fraction"`
	// DistributedTPS is the acknowledged transactions across partitions
	// (Summary.SpanningAcked) a second.
	DistributedTPS float64          `json:"distributed_tps"`
	Counts         map[string]int64 `json:"counts,omitempty"` // acknowledged, by transaction type
	Verdict        Verdict          `json:"verdict"`
	// Started is the instant the run's clock starts from (Runner.Started):
	// second 0 of the per-second figures, offset 0 of Txs.
	Started time.Time `json:"-"`
	// Txs is every transaction's timeline, failed ones too (Runner.Transactions).
	Txs []Tx `json:"-"`
}

func (r *KSResult) finish(spanning int64) {
	r.Spanning = spanning
	if n := r.Transactions + r.Errors + r.Skipped; n > 0 {
		r.DistributedFraction = float64(spanning) / float64(n)
	}
	if r.Seconds > 0 {
		r.DistributedTPS = float64(r.SpanningAcked) / r.Seconds
	}
}

// RunYCSB runs YCSB on cfg's keyspace (loaded by LoadYCSB) for
// cfg.Duration, then verifies its ledger row by row on every partition.
// each, if not nil, gets every second's figures. The error is the run's
// or verification's; a failed verdict is in the result, not an error.
func RunYCSB(ctx context.Context, cfg YCSBConfig, each func(Second)) (KSResult, error) {
	return runYCSB(ctx, cfg, &ycsbDriver{}, each)
}

// runYCSB is RunYCSB with the driver given (tests read its ledger).
func runYCSB(ctx context.Context, cfg YCSBConfig, d *ycsbDriver, each func(Second)) (KSResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return KSResult{}, err
	}
	*d = ycsbDriver{cfg: cfg, ks: cfg.Keyspace, ledger: newYCSBLedger()}
	r := newRunner(cfg.Arrivals, d)
	sum, err := r.Run(ctx, each)
	res := KSResult{Workload: "ycsb", Mode: cfg.Reach.Mode(), Summary: sum, Started: r.Started(), Txs: r.Transactions(0, math.MaxInt64)}
	if err != nil {
		return res, err
	}
	res.finish(d.send.spanning.Load())
	res.Counts = d.ledger.counts()
	res.WritesAcked = res.Counts["writes"]
	if d.ks, err = cfg.Reach.final(ctx, d.ks); err != nil {
		return res, err
	}
	res.Verdict, err = d.verify(ctx)
	return res, err
}

// ycsbDriver runs YCSB transactions; see RunYCSB.
type ycsbDriver struct {
	cfg    YCSBConfig
	ks     *keyspace.Keyspace
	send   *sender
	ledger *ycsbLedger
	epoch  int64        // ledger ids are epoch<<48 | worker<<36 | seq
	next   atomic.Int64 // the next key to insert
	keys   []KeyChooser // per worker
	t0     time.Time    // the ledger's clock origin
}

var _ driver = (*ycsbDriver)(nil)

func (d *ycsbDriver) open(ctx context.Context, workers int) error {
	ps, err := openPools(ctx, d.cfg.Partitions, 1)
	if err != nil {
		return err
	}
	defer ps.close()
	var maxID, maxKey atomic.Int64
	err = ps.each(func(_ string, p *pgxpool.Pool) error {
		var id, key int64
		q := fmt.Sprintf("SELECT coalesce((SELECT max(id) FROM %s), 0), coalesce((SELECT max(ycsb_key) FROM %s), -1)", YCSBLedgerTable, Table)
		if err := p.QueryRow(ctx, q).Scan(&id, &key); err != nil {
			return err
		}
		atomicMax(&maxID, id)
		atomicMax(&maxKey, key)
		return nil
	})
	if err != nil {
		return fmt.Errorf("workload: ycsb: %w", err)
	}
	d.epoch = maxID.Load()>>48 + 1
	d.next.Store(max(maxKey.Load()+1, d.cfg.Records))
	d.keys = make([]KeyChooser, workers)
	for i := range d.keys {
		d.keys[i], _ = NewKeyChooser(d.cfg.Distribution, d.cfg.Records)
	}
	if d.send, err = newSender(ctx, d.cfg.Reach, workers); err != nil {
		return err
	}
	d.t0 = time.Now()
	return nil
}

func (d *ycsbDriver) close() { d.send.close() }

func atomicMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// ycsbOp is one operation: a read of key, an update of one field, or an
// insert of a new key.
type ycsbOp struct {
	kind  byte // 'r', 'u', 'i'
	key   int64
	field int
}

// key draws a key at the run's elapsed time at (the moving hot set).
func (d *ycsbDriver) key(w *workerState) int64 {
	k := d.keys[w.id].Next(w.rng)
	if d.cfg.Distribution == HotSpot && d.cfg.HotMove > 0 {
		hot := max(int64(float64(d.cfg.Records)*HotSetFraction), 1)
		shift := int64(w.at/d.cfg.HotMove) * hot % d.cfg.Records
		k = (k + shift) % d.cfg.Records
	}
	return k
}

func (d *ycsbDriver) txn(ctx context.Context, w *workerState) error {
	ops := make([]ycsbOp, d.cfg.OpsPerTx)
	keys := make([]int64, len(ops))
	for i := range ops {
		op := ycsbOp{kind: 'r'}
		switch {
		case w.rng.Float64() < d.cfg.ReadFraction:
			op.key = d.key(w)
		case w.rng.Float64() < d.cfg.InsertFraction:
			op.kind, op.key = 'i', d.next.Add(1)-1
		default:
			op.kind, op.key, op.field = 'u', d.key(w), w.rng.IntN(Fields)
		}
		ops[i], keys[i] = op, op.key
	}
	parts, err := owners(d.ks, Table, keys...)
	if err != nil {
		return err
	}
	pool, err := d.send.pick(w, parts)
	if err != nil {
		return err
	}
	id := d.epoch<<48 | int64(w.id+1)<<36 | w.seq
	var buf [FieldBytes]byte
	begin := time.Since(d.t0)
	err = inTx(ctx, pool, func(tx pgx.Tx) error { return d.ops(ctx, tx, w.rng, ops, id, buf[:]) })
	d.ledger.record(id, ops, begin, time.Since(d.t0), err)
	return err
}

// ops runs a transaction's operations and, if it wrote, its ledger row.
func (d *ycsbDriver) ops(ctx context.Context, tx pgx.Tx, rng *rand.Rand, ops []ycsbOp, id int64, buf []byte) error {
	var f [Fields]string
	first := int64(-1)
	for _, op := range ops {
		var err error
		switch op.kind {
		case 'r':
			err = tx.QueryRow(ctx, readSQL, op.key).Scan(&f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8], &f[9])
			if errors.Is(err, pgx.ErrNoRows) {
				err = nil
			}
		case 'u':
			_, err = tx.Exec(ctx, updateSQL[op.field], op.key, ycsbValue(rng, id, buf))
		case 'i':
			v := ycsbValue(rng, id, buf)
			_, err = tx.Exec(ctx, insertSQL, op.key, v, v, v, v, v, v, v, v, v, v)
		}
		if err != nil {
			return err
		}
		if op.kind != 'r' && first < 0 {
			first = op.key
		}
	}
	if first < 0 {
		return nil
	}
	_, err := tx.Exec(ctx, "INSERT INTO "+YCSBLedgerTable+" (ycsb_key, id) VALUES ($1, $2)", first, id)
	return err
}

var insertSQL = "INSERT INTO " + Table + " (ycsb_key, field0, field1, field2, field3, field4, field5, field6, field7, field8, field9) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
