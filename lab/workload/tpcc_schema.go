package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicedb/sluice/keyspace"
)

// TPC-C-lite: TPC-C's schema cut to what new-order, payment and
// order-status touch, sized for a small machine. warehouse is sharded by
// w_id; district, customer, history, orders, new_order, order_line and
// stock follow it by their *_w_id (history by h_w_id, the warehouse the
// payment was made at); item is a reference table. Primary keys lead with
// the warehouse id. Money is integer cents (bigint), not numeric. No
// orders or history are loaded: every order and history row is the run's,
// so the ledger accounts for each; district.d_next_o_id starts at 1.

// TPCCScale sizes TPC-C-lite. Zero fields take TPC-C's (Districts 10)
// or the lite defaults (Customers 300 a district, Items 1000).
type TPCCScale struct {
	Warehouses int `json:"warehouses"` // ≥ 1
	Districts  int `json:"districts"`  // per warehouse
	Customers  int `json:"customers"`  // per district
	Items      int `json:"items"`      // item rows, and stock rows per warehouse
}

func (s TPCCScale) withDefaults() (TPCCScale, error) {
	if s.Districts == 0 {
		s.Districts = 10
	}
	if s.Customers == 0 {
		s.Customers = 300
	}
	if s.Items == 0 {
		s.Items = 1000
	}
	switch {
	case s.Warehouses < 1:
		return s, fmt.Errorf("workload: tpcc: warehouses must be ≥ 1, got %d", s.Warehouses)
	case s.Districts < 1 || s.Customers < 1:
		return s, fmt.Errorf("workload: tpcc: districts and customers must be ≥ 1, got %d and %d", s.Districts, s.Customers)
	case s.Items < 15:
		return s, fmt.Errorf("workload: tpcc: items must be ≥ 15 (an order has up to 15 distinct lines), got %d", s.Items)
	}
	return s, nil
}

// Initial money, in cents, as TPC-C loads it.
const (
	tpccWarehouseYTD = 300000_00
	tpccDistrictYTD  = 30000_00
	tpccCustBalance  = -10_00
	tpccCustYTD      = 10_00
)

// TPCCKeyspace returns the TPC-C-lite keyspace named name over parts,
// warehouses 1 … scale.Warehouses split evenly over parts in the order
// given (the first range unbounded below, the last above).
func TPCCKeyspace(name string, parts []keyspace.Partition, scale TPCCScale) (*keyspace.Keyspace, error) {
	scale, err := scale.withDefaults()
	if err != nil {
		return nil, err
	}
	if scale.Warehouses < len(parts) {
		return nil, fmt.Errorf("workload: tpcc keyspace: %d warehouses cannot cover %d partitions", scale.Warehouses, len(parts))
	}
	// The district splits a warehouse's rows when a reconfiguration moves
	// one warehouse in several chunks (the Squall paper §4.4).
	co := func(table, col, district string) keyspace.Table {
		return keyspace.Table{Name: table, Kind: keyspace.CoPartitioned, Column: col, Root: "warehouse", Secondary: district}
	}
	ks := &keyspace.Keyspace{
		Name:       name,
		Partitions: parts,
		Tables: []keyspace.Table{
			{Name: "warehouse", Kind: keyspace.Sharded, Column: "w_id", Type: keyspace.Int},
			co("district", "d_w_id", "d_id"), co("customer", "c_w_id", "c_d_id"), co("history", "h_w_id", "h_d_id"),
			co("orders", "o_w_id", "o_d_id"), co("new_order", "no_w_id", "no_d_id"), co("order_line", "ol_w_id", "ol_d_id"),
			co("stock", "s_w_id", ""),
			{Name: "item", Kind: keyspace.Reference},
		},
		Schema: tpccSchema,
		Plan:   evenPlan("warehouse", parts, 1, int64(scale.Warehouses)+1),
	}
	if err := ks.Validate(); err != nil {
		return nil, err
	}
	return ks, nil
}

const tpccSchema = `
CREATE TABLE IF NOT EXISTS warehouse (
	w_id int PRIMARY KEY, w_name text NOT NULL, w_tax int NOT NULL, w_ytd bigint NOT NULL);
CREATE TABLE IF NOT EXISTS district (
	d_w_id int NOT NULL, d_id int NOT NULL, d_name text NOT NULL, d_tax int NOT NULL,
	d_ytd bigint NOT NULL, d_next_o_id int NOT NULL, PRIMARY KEY (d_w_id, d_id));
CREATE TABLE IF NOT EXISTS customer (
	c_w_id int NOT NULL, c_d_id int NOT NULL, c_id int NOT NULL, c_first text NOT NULL, c_last text NOT NULL,
	c_credit text NOT NULL, c_discount int NOT NULL, c_balance bigint NOT NULL, c_ytd_payment bigint NOT NULL,
	c_payment_cnt int NOT NULL, c_data text NOT NULL, PRIMARY KEY (c_w_id, c_d_id, c_id));
CREATE TABLE IF NOT EXISTS history (
	h_w_id int NOT NULL, h_id bigint NOT NULL, h_d_id int NOT NULL, h_c_w_id int NOT NULL, h_c_d_id int NOT NULL,
	h_c_id int NOT NULL, h_date timestamptz NOT NULL DEFAULT now(), h_amount bigint NOT NULL, h_data text NOT NULL);
CREATE TABLE IF NOT EXISTS orders (
	o_w_id int NOT NULL, o_d_id int NOT NULL, o_id int NOT NULL, o_c_id int NOT NULL,
	o_entry_d timestamptz NOT NULL DEFAULT now(), o_carrier_id int, o_ol_cnt int NOT NULL, o_all_local int NOT NULL,
	PRIMARY KEY (o_w_id, o_d_id, o_id));
CREATE INDEX IF NOT EXISTS orders_customer ON orders (o_w_id, o_d_id, o_c_id, o_id);
CREATE TABLE IF NOT EXISTS new_order (
	no_w_id int NOT NULL, no_d_id int NOT NULL, no_o_id int NOT NULL, PRIMARY KEY (no_w_id, no_d_id, no_o_id));
CREATE TABLE IF NOT EXISTS order_line (
	ol_w_id int NOT NULL, ol_d_id int NOT NULL, ol_o_id int NOT NULL, ol_number int NOT NULL, ol_i_id int NOT NULL,
	ol_supply_w_id int NOT NULL, ol_quantity int NOT NULL, ol_amount bigint NOT NULL, ol_dist_info text NOT NULL,
	PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number));
CREATE TABLE IF NOT EXISTS stock (
	s_w_id int NOT NULL, s_i_id int NOT NULL, s_quantity int NOT NULL, s_ytd bigint NOT NULL, s_order_cnt int NOT NULL,
	s_remote_cnt int NOT NULL, s_dist_info text NOT NULL, s_data text NOT NULL, PRIMARY KEY (s_w_id, s_i_id));
CREATE TABLE IF NOT EXISTS item (
	i_id int PRIMARY KEY, i_name text NOT NULL, i_price bigint NOT NULL, i_data text NOT NULL);
`

// LoadTPCC creates ks's schema on every partition (dsns: partition →
// DSN), empties its tables, and copies each warehouse's rows to the
// partition owning it and item to every partition, values drawn from seed.
func LoadTPCC(ctx context.Context, ks *keyspace.Keyspace, dsns map[string]string, scale TPCCScale, seed uint64) (LoadStats, error) {
	start := time.Now()
	scale, err := scale.withDefaults()
	if err != nil {
		return LoadStats{}, err
	}
	ps, err := openPools(ctx, dsns, 1)
	if err != nil {
		return LoadStats{}, err
	}
	defer ps.close()
	if err := applySchema(ctx, ks, ps); err != nil {
		return LoadStats{}, fmt.Errorf("workload: load tpcc: %w", err)
	}
	counts := map[string]*atomic.Int64{}
	for _, t := range ks.Tables {
		counts[t.Name] = &atomic.Int64{}
	}
	err = ps.each(func(part string, p *pgxpool.Pool) error {
		rng := rand.New(rand.NewPCG(seed, 0x7bcc))
		if err := tpccCopy(ctx, p, counts, "item", tpccItems(rng, scale)); err != nil {
			return err
		}
		for w := 1; w <= scale.Warehouses; w++ {
			if o, _ := ks.Owner("warehouse", keyspace.IntKey(int64(w))); o != part {
				continue
			}
			for table, rows := range tpccWarehouseRows(rng, scale, w) {
				if err := tpccCopy(ctx, p, counts, table, rows); err != nil {
					return err
				}
			}
		}
		_, err := p.Exec(ctx, "ANALYZE")
		return err
	})
	if err != nil {
		return LoadStats{}, fmt.Errorf("workload: load tpcc: %w", err)
	}
	st := LoadStats{Rows: map[string]int64{}, Seconds: time.Since(start).Seconds()}
	for t, n := range counts {
		if n.Load() > 0 {
			st.Rows[t] = n.Load()
		}
	}
	return st, nil
}

// tpccRows is a table's columns and rows for COPY.
type tpccRows struct {
	cols []string
	rows [][]any
}

func tpccCopy(ctx context.Context, p *pgxpool.Pool, counts map[string]*atomic.Int64, table string, r tpccRows) error {
	n, err := p.CopyFrom(ctx, pgx.Identifier{table}, r.cols, pgx.CopyFromRows(r.rows))
	if err != nil {
		return fmt.Errorf("copy %s: %w", table, err)
	}
	counts[table].Add(n)
	return nil
}

func tpccItems(rng *rand.Rand, s TPCCScale) tpccRows {
	r := tpccRows{cols: []string{"i_id", "i_name", "i_price", "i_data"}}
	for i := 1; i <= s.Items; i++ {
		r.rows = append(r.rows, []any{i, randText(rng, 14, 24), 100 + rng.Int64N(9901), randText(rng, 26, 50)})
	}
	return r
}

// tpccWarehouseRows returns warehouse w's rows of warehouse, district,
// customer and stock.
func tpccWarehouseRows(rng *rand.Rand, s TPCCScale, w int) map[string]tpccRows {
	out := map[string]tpccRows{
		"warehouse": {cols: []string{"w_id", "w_name", "w_tax", "w_ytd"},
			rows: [][]any{{w, randText(rng, 6, 10), rng.IntN(2001), int64(tpccWarehouseYTD)}}},
	}
	d := tpccRows{cols: []string{"d_w_id", "d_id", "d_name", "d_tax", "d_ytd", "d_next_o_id"}}
	c := tpccRows{cols: []string{"c_w_id", "c_d_id", "c_id", "c_first", "c_last", "c_credit", "c_discount",
		"c_balance", "c_ytd_payment", "c_payment_cnt", "c_data"}}
	for di := 1; di <= s.Districts; di++ {
		d.rows = append(d.rows, []any{w, di, randText(rng, 6, 10), rng.IntN(2001), int64(tpccDistrictYTD), 1})
		for ci := 1; ci <= s.Customers; ci++ {
			credit := "GC"
			if rng.IntN(10) == 0 {
				credit = "BC"
			}
			c.rows = append(c.rows, []any{w, di, ci, randText(rng, 8, 16), lastName(ci - 1), credit,
				rng.IntN(5001), int64(tpccCustBalance), int64(tpccCustYTD), 1, randText(rng, 50, 100)})
		}
	}
	st := tpccRows{cols: []string{"s_w_id", "s_i_id", "s_quantity", "s_ytd", "s_order_cnt", "s_remote_cnt", "s_dist_info", "s_data"}}
	for i := 1; i <= s.Items; i++ {
		st.rows = append(st.rows, []any{w, i, 10 + rng.IntN(91), int64(0), 0, 0, randText(rng, 24, 24), randText(rng, 26, 50)})
	}
	out["district"], out["customer"], out["stock"] = d, c, st
	return out
}

// randText is lo … hi printable characters.
func randText(rng *rand.Rand, lo, hi int) string {
	b := make([]byte, lo+rng.IntN(hi-lo+1))
	fillValue(rng, b)
	return string(b)
}

var syllables = [...]string{"BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING"}

// lastName is TPC-C's customer last name for n in [0, 999].
func lastName(n int) string {
	n %= 1000
	return syllables[n/100] + syllables[n/10%10] + syllables[n%10]
}
