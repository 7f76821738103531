package workload

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicedb/sluice/keyspace"
)

// TPCCConfig is a TPC-C-lite run over a keyspace. Each arrival is a
// new-order (NewOrderFraction), a payment (PaymentFraction) or else a
// read-only order-status, at a home warehouse and district drawn
// uniformly. A new-order is remote with probability RemoteNewOrder: one of
// its lines is supplied by another warehouse; a payment with probability
// RemotePayment: its customer belongs to another warehouse. The other
// warehouse is on another partition when the plan has one. Every statement
// names its warehouse (equality on the *_w_id column), so a router can
// route it; lines update stock in (warehouse, item) order, so transactions
// never wait on each other in a cycle.
type TPCCConfig struct {
	Arrivals
	Reach
	Keyspace *keyspace.Keyspace
	Scale    TPCCScale // as loaded
	// Mix: zero fields take TPC-C's shares (0.45 new-order, 0.43 payment).
	NewOrderFraction float64
	PaymentFraction  float64
	// Remote shares: zero takes the default (0.10, 0.15); negative means none.
	RemoteNewOrder float64
	RemotePayment  float64
	// HotWarehouses, when > 0, makes warehouses 1 … HotWarehouses hot:
	// HotFraction of transactions (0 … 1) take one of them as their home
	// warehouse, the others one of the rest, each uniformly (the Squall
	// paper's skewed TPC-C). 0: every warehouse equally likely.
	HotWarehouses int
	HotFraction   float64
}

func (c TPCCConfig) withDefaults() (TPCCConfig, error) {
	var err error
	if c.Arrivals, err = c.Arrivals.withDefaults(); err != nil {
		return c, err
	}
	if c.Scale, err = c.Scale.withDefaults(); err != nil {
		return c, err
	}
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		} else if *v < 0 {
			*v = 0
		}
	}
	def(&c.NewOrderFraction, 0.45)
	def(&c.PaymentFraction, 0.43)
	def(&c.RemoteNewOrder, 0.10)
	def(&c.RemotePayment, 0.15)
	switch {
	case c.Keyspace == nil:
		return c, fmt.Errorf("workload: tpcc: no keyspace")
	case c.NewOrderFraction+c.PaymentFraction > 1:
		return c, fmt.Errorf("workload: tpcc: new-order and payment fractions add up to %v, above 1", c.NewOrderFraction+c.PaymentFraction)
	case c.RemoteNewOrder > 1 || c.RemotePayment > 1:
		return c, fmt.Errorf("workload: tpcc: remote fractions must be ≤ 1, got %v and %v", c.RemoteNewOrder, c.RemotePayment)
	}
	if c.HotWarehouses < 0 || c.HotWarehouses > c.Scale.Warehouses || c.HotFraction < 0 || c.HotFraction > 1 {
		return c, fmt.Errorf("workload: tpcc: hot warehouses %d of %d at fraction %v: want 0 … warehouses and a fraction in [0, 1]",
			c.HotWarehouses, c.Scale.Warehouses, c.HotFraction)
	}
	return c, c.Reach.Validate(c.Keyspace)
}

// home draws a transaction's home warehouse (HotWarehouses).
func (c TPCCConfig) home(rng *rand.Rand) int {
	n, hot := c.Scale.Warehouses, c.HotWarehouses
	switch {
	case hot <= 0:
		return 1 + rng.IntN(n)
	case hot == n || rng.Float64() < c.HotFraction:
		return 1 + rng.IntN(hot)
	}
	return hot + 1 + rng.IntN(n-hot)
}

// RunTPCC runs TPC-C-lite on cfg's keyspace (loaded by LoadTPCC) for
// cfg.Duration, then verifies its ledger row by row on every partition
// and TPC-C's consistency conditions across them. Set cfg.Router to run
// through the keyspace router. The error is the run's or verification's;
// a failed verdict is in the result.
func RunTPCC(ctx context.Context, cfg TPCCConfig, each func(Second)) (KSResult, error) {
	return runTPCC(ctx, cfg, &tpccDriver{}, each)
}

func runTPCC(ctx context.Context, cfg TPCCConfig, d *tpccDriver, each func(Second)) (KSResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return KSResult{}, err
	}
	*d = tpccDriver{cfg: cfg, ks: cfg.Keyspace, ledger: newTPCCLedger()}
	r := newRunner(cfg.Arrivals, d)
	sum, err := r.Run(ctx, each)
	res := KSResult{Workload: "tpcc", Mode: cfg.Reach.Mode(), Summary: sum, Started: r.Started(), Txs: r.Transactions(0, math.MaxInt64)}
	if err != nil {
		return res, err
	}
	res.finish(d.send.spanning.Load())
	res.Counts = d.ledger.counts()
	res.WritesAcked = res.Counts["new_order"] + res.Counts["payment"]
	if d.ks, err = cfg.Reach.final(ctx, d.ks); err != nil {
		return res, err
	}
	if err := d.own(); err != nil { // the workers have returned
		return res, err
	}
	res.Verdict, err = d.verify(ctx)
	return res, err
}

// tpccDriver runs TPC-C-lite transactions; see RunTPCC.
type tpccDriver struct {
	cfg    TPCCConfig
	ks     *keyspace.Keyspace
	send   *sender
	ledger *tpccLedger
	epoch  int64              // history ids are epoch<<48 | worker<<36 | seq
	owner  []string           // by warehouse id
	away   [][]int            // by warehouse id: the warehouses to pick a remote one from
	start  map[[2]int32]int32 // d_next_o_id of each (warehouse, district) when the run began
	cRand  [2]int             // NURand's C for customers and items, fixed per run
	nRead  atomic.Int64
}

var _ driver = (*tpccDriver)(nil)

// own sets d.owner from d.ks's plan: the run's, then, for verification,
// the final keyspace's (Reach.Final).
func (d *tpccDriver) own() error {
	nw := d.cfg.Scale.Warehouses
	d.owner = make([]string, nw+1)
	for w := 1; w <= nw; w++ {
		o, err := d.ks.Owner("warehouse", keyspace.IntKey(int64(w)))
		if err != nil {
			return fmt.Errorf("workload: tpcc: %w", err)
		}
		d.owner[w] = o
	}
	return nil
}

func (d *tpccDriver) open(ctx context.Context, workers int) error {
	nw := d.cfg.Scale.Warehouses
	if err := d.own(); err != nil {
		return err
	}
	d.away = make([][]int, nw+1)
	for w := 1; w <= nw; w++ {
		var other, same []int
		for v := 1; v <= nw; v++ {
			switch {
			case d.owner[v] != d.owner[w]:
				other = append(other, v)
			case v != w:
				same = append(same, v)
			}
		}
		d.away[w] = other
		if len(other) == 0 {
			d.away[w] = same
		}
	}
	if err := d.readStart(ctx); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(d.cfg.Seed, 0xc))
	d.cRand = [2]int{rng.IntN(1024), rng.IntN(8192)}
	var err error
	d.send, err = newSender(ctx, d.cfg.Reach, workers)
	return err
}

// readStart reads the history epoch and each district's next order id.
func (d *tpccDriver) readStart(ctx context.Context) error {
	ps, err := openPools(ctx, d.cfg.Partitions, 1)
	if err != nil {
		return err
	}
	defer ps.close()
	var maxID atomic.Int64
	starts := make(chan map[[2]int32]int32, len(ps))
	err = ps.each(func(_ string, p *pgxpool.Pool) error {
		var id int64
		if err := p.QueryRow(ctx, "SELECT coalesce(max(h_id), 0) FROM history").Scan(&id); err != nil {
			return err
		}
		atomicMax(&maxID, id)
		m := map[[2]int32]int32{}
		var w, di, next int32
		rows, _ := p.Query(ctx, "SELECT d_w_id, d_id, d_next_o_id FROM district")
		_, err := pgx.ForEachRow(rows, []any{&w, &di, &next}, func() error { m[[2]int32{w, di}] = next; return nil })
		starts <- m
		return err
	})
	close(starts)
	if err != nil {
		return fmt.Errorf("workload: tpcc: %w", err)
	}
	d.start = map[[2]int32]int32{}
	for m := range starts {
		for k, v := range m {
			d.start[k] = v
		}
	}
	d.epoch = maxID.Load()>>48 + 1
	return nil
}

func (d *tpccDriver) close() { d.send.close() }

// nuRand is TPC-C's non-uniform random NURand(A, 1, n) with constant c.
func nuRand(rng *rand.Rand, a, c, n int) int {
	return ((rng.IntN(a+1)|(1+rng.IntN(n)))+c)%n + 1
}

// remote picks a warehouse other than w, on another partition if any.
func (d *tpccDriver) remote(rng *rand.Rand, w int) (int, bool) {
	if len(d.away[w]) == 0 {
		return w, false
	}
	return d.away[w][rng.IntN(len(d.away[w]))], true
}

func (d *tpccDriver) txn(ctx context.Context, w *workerState) error {
	s := d.cfg.Scale
	home, dist := d.cfg.home(w.rng), 1+w.rng.IntN(s.Districts)
	switch x := w.rng.Float64(); {
	case x < d.cfg.NewOrderFraction:
		return d.newOrder(ctx, w, home, dist)
	case x < d.cfg.NewOrderFraction+d.cfg.PaymentFraction:
		return d.payment(ctx, w, home, dist)
	default:
		return d.orderStatus(ctx, w, home, dist)
	}
}

// pick routes worker w's transaction touching warehouses ws.
func (d *tpccDriver) pick(w *workerState, ws ...int) (*pgxpool.Pool, error) {
	var parts []string
	for _, wh := range ws {
		if i := sort.SearchStrings(parts, d.owner[wh]); i == len(parts) || parts[i] != d.owner[wh] {
			parts = append(parts, d.owner[wh])
			sort.Strings(parts)
		}
	}
	return d.send.pick(w, parts)
}

// orderLine is one line of a new order.
type orderLine struct {
	item, supply, qty int
}

func (d *tpccDriver) newOrder(ctx context.Context, w *workerState, home, dist int) error {
	s := d.cfg.Scale
	cust := nuRand(w.rng, 1023, d.cRand[0], s.Customers)
	lines := make([]orderLine, 5+w.rng.IntN(11))
	seen := map[int]bool{}
	for i := range lines {
		it := nuRand(w.rng, 8191, d.cRand[1], s.Items)
		for seen[it] {
			it = 1 + w.rng.IntN(s.Items)
		}
		seen[it] = true
		lines[i] = orderLine{item: it, supply: home, qty: 1 + w.rng.IntN(10)}
	}
	remote := false
	if w.rng.Float64() < d.cfg.RemoteNewOrder {
		lines[w.rng.IntN(len(lines))].supply, remote = d.remote(w.rng, home)
	}
	sort.Slice(lines, func(i, j int) bool {
		a, b := lines[i], lines[j]
		return a.supply < b.supply || a.supply == b.supply && a.item < b.item
	})
	ws := []int{home}
	for _, l := range lines {
		ws = append(ws, l.supply)
	}
	pool, err := d.pick(w, ws...)
	if err != nil {
		return err
	}
	allLocal := 1
	if remote {
		allLocal = 0
	}
	var oid int32
	err = inTx(ctx, pool, func(tx pgx.Tx) error {
		var wTax, dTax, disc int
		var last, credit string
		if err := tx.QueryRow(ctx, "SELECT w_tax FROM warehouse WHERE w_id = $1", home).Scan(&wTax); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, "UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = $1 AND d_id = $2 RETURNING d_next_o_id - 1, d_tax",
			home, dist).Scan(&oid, &dTax); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, "SELECT c_discount, c_last, c_credit FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3",
			home, dist, cust).Scan(&disc, &last, &credit); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO orders (o_w_id, o_d_id, o_id, o_c_id, o_ol_cnt, o_all_local) VALUES ($1, $2, $3, $4, $5, $6)",
			home, dist, oid, cust, len(lines), allLocal); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO new_order (no_w_id, no_d_id, no_o_id) VALUES ($1, $2, $3)", home, dist, oid); err != nil {
			return err
		}
		return d.orderLines(ctx, tx, home, dist, int(oid), lines)
	})
	if err == nil {
		d.ledger.order(home, dist, int(oid), len(lines), remote)
	}
	return err
}

// orderLines updates each line's stock and inserts the line.
func (d *tpccDriver) orderLines(ctx context.Context, tx pgx.Tx, home, dist, oid int, lines []orderLine) error {
	for n, l := range lines {
		var price int64
		var info string
		if err := tx.QueryRow(ctx, "SELECT i_price FROM item WHERE i_id = $1", l.item).Scan(&price); err != nil {
			return err
		}
		rem := 0
		if l.supply != home {
			rem = 1
		}
		if err := tx.QueryRow(ctx, `UPDATE stock SET s_quantity = CASE WHEN s_quantity >= $3 + 10 THEN s_quantity - $3 ELSE s_quantity - $3 + 91 END,
			s_ytd = s_ytd + $3, s_order_cnt = s_order_cnt + 1, s_remote_cnt = s_remote_cnt + $4
			WHERE s_w_id = $1 AND s_i_id = $2 RETURNING s_dist_info`, l.supply, l.item, l.qty, rem).Scan(&info); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO order_line (ol_w_id, ol_d_id, ol_o_id, ol_number, ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_dist_info)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, home, dist, oid, n+1, l.item, l.supply, l.qty, price*int64(l.qty), info); err != nil {
			return err
		}
	}
	return nil
}

func (d *tpccDriver) payment(ctx context.Context, w *workerState, home, dist int) error {
	s := d.cfg.Scale
	cw, cd, remote := home, dist, false
	if w.rng.Float64() < d.cfg.RemotePayment {
		if cw, remote = d.remote(w.rng, home); remote {
			cd = 1 + w.rng.IntN(s.Districts)
		}
	}
	cust := nuRand(w.rng, 1023, d.cRand[0], s.Customers)
	amount := int64(100 + w.rng.IntN(500000))
	id := d.epoch<<48 | int64(w.id+1)<<36 | w.seq
	pool, err := d.pick(w, home, cw)
	if err != nil {
		return err
	}
	err = inTx(ctx, pool, func(tx pgx.Tx) error {
		var wName, dName, credit string
		if err := tx.QueryRow(ctx, "UPDATE warehouse SET w_ytd = w_ytd + $2 WHERE w_id = $1 RETURNING w_name", home, amount).Scan(&wName); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, "UPDATE district SET d_ytd = d_ytd + $3 WHERE d_w_id = $1 AND d_id = $2 RETURNING d_name",
			home, dist, amount).Scan(&dName); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `UPDATE customer SET c_balance = c_balance - $4, c_ytd_payment = c_ytd_payment + $4,
			c_payment_cnt = c_payment_cnt + 1 WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3 RETURNING c_credit`,
			cw, cd, cust, amount).Scan(&credit); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO history (h_w_id, h_id, h_d_id, h_c_w_id, h_c_d_id, h_c_id, h_amount, h_data)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, home, id, dist, cw, cd, cust, amount, wName+"    "+dName)
		return err
	})
	if err == nil {
		d.ledger.payment(id, home, remote)
	}
	return err
}

// orderStatus reads a customer and the lines of their latest order.
func (d *tpccDriver) orderStatus(ctx context.Context, w *workerState, home, dist int) error {
	cust := nuRand(w.rng, 1023, d.cRand[0], d.cfg.Scale.Customers)
	pool, err := d.pick(w, home)
	if err != nil {
		return err
	}
	err = inTx(ctx, pool, func(tx pgx.Tx) error {
		var bal int64
		var first, last string
		if err := tx.QueryRow(ctx, "SELECT c_balance, c_first, c_last FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3",
			home, dist, cust).Scan(&bal, &first, &last); err != nil {
			return err
		}
		var oid int
		err := tx.QueryRow(ctx, "SELECT o_id FROM orders WHERE o_w_id = $1 AND o_d_id = $2 AND o_c_id = $3 ORDER BY o_id DESC LIMIT 1",
			home, dist, cust).Scan(&oid)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		} else if err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, "SELECT ol_i_id, ol_supply_w_id, ol_quantity, ol_amount FROM order_line WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3",
			home, dist, oid)
		var a, b, c int
		var e int64
		_, err = pgx.ForEachRow(rows, []any{&a, &b, &c, &e}, func() error { return nil })
		return err
	})
	if err == nil {
		d.nRead.Add(1)
	}
	return err
}
