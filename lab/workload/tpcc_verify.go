package workload

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// tpccLedger remembers a TPC-C-lite run's acknowledged writes: each
// new order (warehouse, district, order id) with its line count, and each
// payment's history row by id with its warehouse. Safe for concurrent use.
type tpccLedger struct {
	mu      sync.Mutex
	orders  map[okey]int  // → lines
	history map[int64]int // h_id → h_w_id
	n       map[string]int64
}

// okey is an order's key (o_w_id, o_d_id, o_id), or a district's (o_id 0).
type okey [3]int32

func newTPCCLedger() *tpccLedger {
	return &tpccLedger{orders: map[okey]int{}, history: map[int64]int{}, n: map[string]int64{}}
}

func (l *tpccLedger) order(w, d, o, lines int, remote bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.orders[okey{int32(w), int32(d), int32(o)}] = lines
	l.n["new_order"]++
	if remote {
		l.n["new_order_remote"]++
	}
}

func (l *tpccLedger) payment(id int64, w int, remote bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.history[id] = w
	l.n["payment"]++
	if remote {
		l.n["payment_remote"]++
	}
}

func (l *tpccLedger) counts() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.n)
}

// tpccPart is what verification reads from one partition.
type tpccPart struct {
	name      string
	orders    map[okey]int32 // → o_ol_cnt
	lines     map[okey]int32 // order → its order_line rows
	newOrders map[okey]bool
	next      map[okey]int32    // district (o_id 0) → d_next_o_id
	hist      map[int64]int32   // this run's h_id → h_w_id
	paid      map[okey][2]int64 // warehouse (0,0), district (d,0) or customer → history amount, count
	ytd       map[okey][3]int64 // warehouse, district: ytd; customer: ytd, count, balance (changed ones)
	stock     map[okey][3]int64 // (w, i): s_ytd, s_order_cnt, s_remote_cnt (changed ones)
	supplied  map[okey][3]int64 // (supply w, i): quantity, lines, remote lines
}

// verify reads every partition and checks the ledger and TPC-C's
// consistency conditions; see Verdict.
func (d *tpccDriver) verify(ctx context.Context) (Verdict, error) {
	ps, err := openPools(ctx, d.cfg.Partitions, 1)
	if err != nil {
		return Verdict{}, err
	}
	defer ps.close()
	var mu sync.Mutex
	var parts []*tpccPart
	err = ps.each(func(name string, p *pgxpool.Pool) error {
		tp, err := d.readPart(ctx, name, p)
		mu.Lock()
		parts = append(parts, tp)
		mu.Unlock()
		return err
	})
	if err != nil {
		return Verdict{}, fmt.Errorf("workload: tpcc verify: %w", err)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].name < parts[j].name })
	var v Verdict
	d.judgeOrders(&v, parts)
	d.judgeHistory(&v, parts)
	judgeMoney(&v, parts)
	judgeStock(&v, parts)
	v.Placement, err = CheckPlacement(ctx, d.ks, ps)
	return v, err
}

// readPart reads one partition's rows for verify.
func (d *tpccDriver) readPart(ctx context.Context, name string, p *pgxpool.Pool) (*tpccPart, error) {
	tp := &tpccPart{name: name, orders: map[okey]int32{}, lines: map[okey]int32{}, newOrders: map[okey]bool{},
		next: map[okey]int32{}, hist: map[int64]int32{}, paid: map[okey][2]int64{}, ytd: map[okey][3]int64{},
		stock: map[okey][3]int64{}, supplied: map[okey][3]int64{}}
	var k okey
	var a, b, c int64
	var n int32
	var id int64
	reads := []struct {
		sql  string
		args []any
		scan []any
		fn   func()
	}{
		{"SELECT o_w_id, o_d_id, o_id, o_ol_cnt FROM orders", nil, []any{&k[0], &k[1], &k[2], &n}, func() { tp.orders[k] = n }},
		{"SELECT ol_w_id, ol_d_id, ol_o_id, count(*)::int FROM order_line GROUP BY 1, 2, 3", nil, []any{&k[0], &k[1], &k[2], &n}, func() { tp.lines[k] = n }},
		{"SELECT no_w_id, no_d_id, no_o_id FROM new_order", nil, []any{&k[0], &k[1], &k[2]}, func() { tp.newOrders[k] = true }},
		{"SELECT d_w_id, d_id, 0, d_next_o_id FROM district", nil, []any{&k[0], &k[1], &k[2], &n}, func() { tp.next[k] = n }},
		{"SELECT h_id, h_w_id FROM history WHERE h_id >> 48 = $1", []any{d.epoch}, []any{&id, &n}, func() { tp.hist[id] = n }},
		{`SELECT h_w_id, 0, 0, sum(h_amount), count(*) FROM history GROUP BY 1
		  UNION ALL SELECT h_w_id, h_d_id, 0, sum(h_amount), count(*) FROM history GROUP BY 1, 2
		  UNION ALL SELECT -h_c_w_id, h_c_d_id, h_c_id, sum(h_amount), count(*) FROM history GROUP BY 1, 2, 3`, nil,
			[]any{&k[0], &k[1], &k[2], &a, &b}, func() { tp.paid[k] = [2]int64{a, b} }},
		{`SELECT w_id, 0, 0, w_ytd - $1, 0, 0 FROM warehouse
		  UNION ALL SELECT d_w_id, d_id, 0, d_ytd - $2, 0, 0 FROM district
		  UNION ALL SELECT -c_w_id, c_d_id, c_id, c_ytd_payment - $3, c_payment_cnt - 1, $4 - c_balance FROM customer
		    WHERE c_payment_cnt <> 1 OR c_ytd_payment <> $3 OR c_balance <> $4`,
			[]any{tpccWarehouseYTD, tpccDistrictYTD, tpccCustYTD, tpccCustBalance},
			[]any{&k[0], &k[1], &k[2], &a, &b, &c}, func() { tp.ytd[k] = [3]int64{a, b, c} }},
		{"SELECT s_w_id, s_i_id, 0, s_ytd, s_order_cnt, s_remote_cnt FROM stock WHERE s_ytd <> 0 OR s_order_cnt <> 0 OR s_remote_cnt <> 0", nil,
			[]any{&k[0], &k[1], &k[2], &a, &b, &c}, func() { tp.stock[k] = [3]int64{a, b, c} }},
		{`SELECT ol_supply_w_id, ol_i_id, 0, sum(ol_quantity), count(*), count(*) FILTER (WHERE ol_supply_w_id <> ol_w_id)
		  FROM order_line GROUP BY 1, 2`, nil, []any{&k[0], &k[1], &k[2], &a, &b, &c}, func() { tp.supplied[k] = [3]int64{a, b, c} }},
	}
	for _, r := range reads {
		rows, _ := p.Query(ctx, r.sql, r.args...)
		if _, err := pgx.ForEachRow(rows, r.scan, func() error { r.fn(); return nil }); err != nil {
			return tp, fmt.Errorf("%.40s…: %w", r.sql, err)
		}
	}
	return tp, nil
}

// judgeOrders: each acknowledged order once, on its warehouse's owner,
// with its lines and new_order row; each district's orders exactly
// 1 … d_next_o_id−1 on its owner, the counter never behind.
func (d *tpccDriver) judgeOrders(v *Verdict, parts []*tpccPart) {
	l := d.ledger
	byPart := map[string]*tpccPart{}
	seen := map[okey]sighting{}
	for _, tp := range parts {
		byPart[tp.name] = tp
		for k := range tp.orders {
			seen[k] = append(seen[k], tp.name)
		}
	}
	for k, lines := range l.orders {
		v.Acknowledged++
		what := fmt.Sprintf("order (%d,%d,%d)", k[0], k[1], k[2])
		owner := d.owner[k[0]]
		v.judge(what, owner, seen[k])
		tp := byPart[owner]
		if _, ok := tp.orders[k]; !ok {
			continue
		}
		if tp.orders[k] != int32(lines) || tp.lines[k] != int32(lines) || !tp.newOrders[k] {
			v.Lost++
			v.problem("%s: o_ol_cnt %d and %d lines on %s (new_order row %v), acknowledged with %d lines",
				what, tp.orders[k], tp.lines[k], owner, tp.newOrders[k], lines)
		}
	}
	for k := range seen {
		if _, ok := l.orders[k]; !ok && k[2] >= d.start[[2]int32{k[0], k[1]}] {
			v.Unacknowledged++
		}
	}
	maxAcked := map[okey]int32{}
	for k := range l.orders {
		dk := okey{k[0], k[1], 0}
		maxAcked[dk] = max(maxAcked[dk], k[2])
	}
	for w := 1; w < len(d.owner); w++ {
		tp := byPart[d.owner[w]]
		for di := 1; di <= d.cfg.Scale.Districts; di++ {
			dk := okey{int32(w), int32(di), 0}
			next, ok := tp.next[dk]
			var count, top int32
			for k := range tp.orders {
				if k[0] == dk[0] && k[1] == dk[1] {
					count++
					top = max(top, k[2])
				}
			}
			if !ok || count != next-1 || top != next-1 || next < d.start[[2]int32{dk[0], dk[1]}] || next <= maxAcked[dk] {
				v.Inconsistent++
				v.problem("district (%d,%d) on %s: d_next_o_id %d (was %d), %d orders up to %d, acknowledged up to %d",
					w, di, tp.name, next, d.start[[2]int32{dk[0], dk[1]}], count, top, maxAcked[dk])
			}
		}
	}
}

// judgeHistory: each acknowledged payment's history row once, on the
// owner of its warehouse.
func (d *tpccDriver) judgeHistory(v *Verdict, parts []*tpccPart) {
	seen := map[int64]sighting{}
	for _, tp := range parts {
		for id := range tp.hist {
			seen[id] = append(seen[id], tp.name)
		}
	}
	for id, w := range d.ledger.history {
		v.Acknowledged++
		v.judge(fmt.Sprintf("history %#x (warehouse %d)", id, w), d.owner[w], seen[id])
	}
	for id := range seen {
		if _, ok := d.ledger.history[id]; !ok {
			v.Unacknowledged++
		}
	}
}

// judgeMoney: each warehouse's and district's ytd grew by the payments in
// its history; each customer's ytd, payment count and balance moved by
// theirs (customers are keyed by −c_w_id), history summed over all partitions.
func judgeMoney(v *Verdict, parts []*tpccPart) {
	paid := map[okey][2]int64{}
	ytd := map[okey][3]int64{}
	for _, tp := range parts {
		for k, p := range tp.paid {
			q := paid[k]
			paid[k] = [2]int64{q[0] + p[0], q[1] + p[1]}
		}
		for k, y := range tp.ytd {
			ytd[k] = y
		}
	}
	check := func(k okey, y [3]int64, p [2]int64) {
		want := [3]int64{p[0], 0, 0}
		if k[0] < 0 {
			want = [3]int64{p[0], p[1], p[0]}
		}
		if y != want {
			v.Inconsistent++
			v.problem("money at %v: ytd, count, balance moved by %v; history says %v", k, y, want)
		}
	}
	for k, y := range ytd {
		check(k, y, paid[k])
	}
	for k, p := range paid {
		if _, ok := ytd[k]; !ok {
			check(k, [3]int64{}, p)
		}
	}
}

// judgeStock: each stock row's ytd, order count and remote count match
// the order lines it supplied, on whichever partition they are.
func judgeStock(v *Verdict, parts []*tpccPart) {
	supplied := map[okey][3]int64{}
	stock := map[okey][3]int64{}
	for _, tp := range parts {
		for k, s := range tp.supplied {
			t := supplied[k]
			supplied[k] = [3]int64{t[0] + s[0], t[1] + s[1], t[2] + s[2]}
		}
		maps.Copy(stock, tp.stock)
	}
	for _, m := range []map[okey][3]int64{stock, supplied} {
		for k := range m {
			if stock[k] != supplied[k] {
				v.Inconsistent++
				v.problem("stock (%d,%d): ytd, orders, remote %v; its order lines say %v", k[0], k[1], stock[k], supplied[k])
				delete(stock, k)
				delete(supplied, k)
			}
		}
	}
}
