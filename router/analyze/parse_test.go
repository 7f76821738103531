package analyze

import (
	"strings"
	"testing"
)

// parseCase is one query string and the describe() line of each of its
// statements.
type parseCase struct {
	name string
	sql  string
	want []string
}

func runParse(t *testing.T, cases []parseCase) {
	t.Helper()
	ks := bench(t)
	for _, tc := range cases {
		stmts, err := Parse(tc.sql, ks)
		if err != nil {
			t.Errorf("%s: Parse(%q): %v", tc.name, tc.sql, err)
			continue
		}
		var got []string
		for _, st := range stmts {
			got = append(got, describe(st))
		}
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s: Parse(%q):\ngot  %q\nwant %q", tc.name, tc.sql, got, tc.want)
		}
	}
}

func one(s string) []string { return []string{s} }

func TestYCSB(t *testing.T) {
	runParse(t, []parseCase{
		{"read", `SELECT * FROM usertable WHERE ycsb_key = $1`,
			one("select ro sharded=usertable keys=usertable:$1 params=1")},
		{"read fields", `SELECT field0, field1 FROM usertable WHERE YCSB_KEY = 'user42'`,
			one("select ro sharded=usertable keys=usertable:'user42'")},
		{"update", `UPDATE usertable SET field1 = $1 WHERE ycsb_key = $2`,
			one("update sharded=usertable keys=usertable:$2 params=2")},
		{"insert", `INSERT INTO usertable (ycsb_key, field0, field1) VALUES ($1, $2, $3)`,
			one("insert sharded=usertable keys=usertable:$1 params=3")},
		{"insert rows, key not first", `INSERT INTO usertable (field0, ycsb_key) VALUES ('a', 'user1'), ('b', 'user2'), ('c', 'user1')`,
			one("insert sharded=usertable keys=usertable:'user1',usertable:'user2'")},
		{"delete", `DELETE FROM usertable WHERE ycsb_key = $1`,
			one("delete sharded=usertable keys=usertable:$1 params=1")},
		{"scan", `SELECT * FROM usertable WHERE ycsb_key >= $1 ORDER BY ycsb_key LIMIT 10`,
			one("select ro sharded=usertable range=usertable:[$1,) order=ycsb_key limit=10 params=1")},
		{"scan both bounds, reversed", `SELECT * FROM usertable WHERE $2 > ycsb_key AND ycsb_key > $1 ORDER BY ycsb_key DESC`,
			one("select ro sharded=usertable range=usertable:($1,$2) order=ycsb_key desc params=2")},
		{"scan between, ordered by position under an alias", `SELECT ycsb_key AS k, field0 FROM usertable WHERE ycsb_key BETWEEN 'user1' AND 'user5' ORDER BY 1 DESC LIMIT 3`,
			one("select ro sharded=usertable range=usertable:['user1','user5'] order=k desc limit=3")},
		{"ordered by a key the output lacks", `SELECT field0 FROM usertable WHERE ycsb_key < 'user9' ORDER BY ycsb_key`,
			one("select ro sharded=usertable range=usertable:(,'user9')")},
		{"equality beats range", `SELECT * FROM usertable WHERE ycsb_key >= $1 AND ycsb_key = $2`,
			one("select ro sharded=usertable keys=usertable:$2 params=2")},
		{"insert without columns", `INSERT INTO usertable VALUES ('user1', 'a')`,
			one("insert sharded=usertable missing=usertable.ycsb_key")},
		{"insert computed key", `INSERT INTO usertable (ycsb_key) VALUES ('user' || $1)`,
			one("insert sharded=usertable missing=usertable.ycsb_key params=1")},
		{"insert one computed row", `INSERT INTO usertable (ycsb_key) VALUES ($1), (DEFAULT)`,
			one("insert sharded=usertable keys=usertable:$1 missing=usertable.ycsb_key params=1")},
		{"insert select of values", `INSERT INTO usertable (ycsb_key, field0) SELECT $1, $2 WHERE NOT EXISTS (SELECT 1 FROM usertable WHERE ycsb_key = $1)`,
			one("insert sharded=usertable keys=usertable:$1 params=2")},
		{"upsert", `INSERT INTO usertable (ycsb_key, field0) VALUES ($1, $2) ON CONFLICT (ycsb_key) DO UPDATE SET field0 = excluded.field0`,
			one("insert sharded=usertable keys=usertable:$1 params=2")},
		{"update of the key", `UPDATE usertable SET ycsb_key = $1 WHERE ycsb_key = $2`,
			one("update sharded=usertable keys=usertable:$2 updkey params=2")},
		{"whole table", `SELECT count(*) FROM usertable`,
			one("select ro agg sharded=usertable missing=usertable.ycsb_key")},
	})
}

func TestTPCC(t *testing.T) {
	runParse(t, []parseCase{
		// new-order
		{"customer and warehouse", `SELECT c_discount, c_last, c_credit, w_tax FROM customer, warehouse WHERE w_id = $1 AND c_w_id = w_id AND c_d_id = $2 AND c_id = $3`,
			one("select ro sharded=customer,warehouse keys=customer:$1,warehouse:$1 params=3")},
		{"district for update", `SELECT d_next_o_id, d_tax FROM district WHERE d_id = $1 AND d_w_id = $2 FOR UPDATE`,
			one("select sharded=district keys=district:$2 params=2")},
		{"district next order", `UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_id = $1 AND d_w_id = $2`,
			one("update sharded=district keys=district:$2 params=2")},
		{"orders", `INSERT INTO orders (o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_ol_cnt, o_all_local) VALUES ($1, $2, $3, $4, now(), $5, $6)`,
			one("insert sharded=orders keys=orders:$3 params=6")},
		{"new_order", `INSERT INTO new_order (no_o_id, no_d_id, no_w_id) VALUES ($1, $2, $3)`,
			one("insert sharded=new_order keys=new_order:$3 params=3")},
		{"item", `SELECT i_price, i_name, i_data FROM item WHERE i_id = $1`,
			one("select ro ref=item params=1")},
		{"stock for update", `SELECT s_quantity, s_data, s_dist_01 FROM stock WHERE s_i_id = $1 AND s_w_id = $2 FOR UPDATE`,
			one("select sharded=stock keys=stock:$2 params=2")},
		{"stock", `UPDATE stock SET s_quantity = $1 WHERE s_i_id = $2 AND s_w_id = $3`,
			one("update sharded=stock keys=stock:$3 params=3")},
		{"order_line", `INSERT INTO order_line (ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_dist_info) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			one("insert sharded=order_line keys=order_line:$3 params=9")},
		// payment
		{"warehouse ytd", `UPDATE warehouse SET w_ytd = w_ytd + $1 WHERE w_id = $2`,
			one("update sharded=warehouse keys=warehouse:$2 params=2")},
		{"warehouse address", `SELECT w_street_1, w_street_2, w_city, w_state, w_zip, w_name FROM warehouse WHERE w_id = $1`,
			one("select ro sharded=warehouse keys=warehouse:$1 params=1")},
		{"district ytd", `UPDATE district SET d_ytd = d_ytd + $1 WHERE d_w_id = $2 AND d_id = $3`,
			one("update sharded=district keys=district:$2 params=3")},
		{"customer by name", `SELECT c_id, c_first FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_last = $3 ORDER BY c_first`,
			one("select ro sharded=customer keys=customer:$1 params=3")},
		{"customer balance", `UPDATE customer SET c_balance = c_balance - $1, c_ytd_payment = c_ytd_payment + $1 WHERE c_w_id = $2 AND c_d_id = $3 AND c_id = $4`,
			one("update sharded=customer keys=customer:$2 params=4")},
		{"history", `INSERT INTO history (h_c_d_id, h_c_w_id, h_c_id, h_d_id, h_w_id, h_date, h_amount, h_data) VALUES ($1, $2, $3, $4, $5, now(), $6, $7)`,
			one("insert sharded=history keys=history:$5 params=7")},
		// stock-level: the join is on the item, not the key
		{"stock level", `SELECT count(DISTINCT s_i_id) FROM order_line, stock WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id < $3 AND ol_o_id >= $4 AND s_w_id = $5 AND s_i_id = ol_i_id AND s_quantity < $6`,
			one("select ro agg sharded=order_line,stock keys=order_line:$1,stock:$5 params=6")},
		{"join on the item does not carry the key", `SELECT count(*) FROM order_line JOIN stock ON s_i_id = ol_i_id WHERE ol_w_id = $1`,
			one("select ro agg sharded=order_line,stock keys=order_line:$1 missing=stock.s_w_id params=1")},
		{"join on the key carries it", `SELECT * FROM order_line ol JOIN stock s ON s.s_w_id = ol.ol_w_id AND s.s_i_id = ol.ol_i_id WHERE ol.ol_w_id = $1`,
			one("select ro sharded=order_line,stock keys=order_line:$1,stock:$1 params=1")},
		{"delivery", `SELECT no_o_id FROM new_order WHERE no_d_id = $1 AND no_w_id = $2 ORDER BY no_o_id ASC LIMIT 1 FOR UPDATE SKIP LOCKED`,
			one("select sharded=new_order keys=new_order:$2 limit=1 params=2")},
		{"order status", `SELECT ol_i_id, ol_supply_w_id, ol_quantity FROM order_line WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3`,
			one("select ro sharded=order_line keys=order_line:$1 params=3")},
		{"warehouses listed", `SELECT c_w_id, c_balance FROM customer WHERE c_w_id IN (1, 2, $1) ORDER BY c_w_id DESC LIMIT 5`,
			one("select ro sharded=customer keys=customer:1,customer:2,customer:$1 order=c_w_id desc limit=5 params=1")},
		{"missing key", `SELECT * FROM customer c, warehouse w WHERE c.c_id = 5 AND w.w_id = 1`,
			one("select ro sharded=customer,warehouse keys=warehouse:1 missing=customer.c_w_id")},
		{"reference and sharded", `SELECT i_price, s_quantity FROM item JOIN stock ON s_i_id = i_id WHERE s_w_id = 3 AND i_id = $1`,
			one("select ro sharded=stock ref=item keys=stock:3 params=1")},
		{"insert select", `INSERT INTO history (h_w_id, h_data) SELECT w_id, w_name FROM warehouse WHERE w_id = $1`,
			one("insert sharded=history,warehouse keys=warehouse:$1 missing=history.h_w_id params=1")},
	})
}

func TestPredicates(t *testing.T) {
	runParse(t, []parseCase{
		{"or of equalities", `SELECT * FROM warehouse WHERE w_id = 1 OR w_id = $1`,
			one("select ro sharded=warehouse keys=warehouse:1,warehouse:$1 params=1")},
		{"or of conjunctions", `SELECT * FROM warehouse WHERE (w_id = 1 AND w_name = 'x') OR (w_tax > 0 AND w_id IN (2, 3))`,
			one("select ro sharded=warehouse keys=warehouse:1,warehouse:2,warehouse:3")},
		{"or with a branch without the key", `SELECT * FROM warehouse WHERE w_id = 1 OR w_name = 'x'`,
			one("select ro sharded=warehouse missing=warehouse.w_id")},
		{"and with one conjunct keyed", `SELECT * FROM warehouse WHERE w_name = 'x' AND (w_id = 1 OR w_id = 2)`,
			one("select ro sharded=warehouse keys=warehouse:1,warehouse:2")},
		{"not", `SELECT * FROM warehouse WHERE NOT (w_id = 1)`,
			one("select ro sharded=warehouse missing=warehouse.w_id")},
		{"not in", `SELECT * FROM warehouse WHERE w_id NOT IN (1, 2)`,
			one("select ro sharded=warehouse missing=warehouse.w_id")},
		{"in with an expression", `SELECT * FROM warehouse WHERE w_id IN (1, w_tax)`,
			one("select ro sharded=warehouse missing=warehouse.w_id")},
		{"casts", `SELECT * FROM warehouse WHERE w_id = $1::int AND '5'::bigint = w_id AND w_id = CAST($2 AS int8)`,
			one("select ro sharded=warehouse keys=warehouse:$1,warehouse:'5',warehouse:$2 params=2")},
		{"negative constant", `DELETE FROM warehouse WHERE w_id = -3`,
			one("delete sharded=warehouse keys=warehouse:-3")},
		{"big constant", `DELETE FROM warehouse WHERE w_id = 9999999999`,
			one("delete sharded=warehouse keys=warehouse:9999999999")},
		{"text key collated", `SELECT * FROM usertable WHERE ycsb_key = 'user1' COLLATE "C"`,
			one("select ro sharded=usertable keys=usertable:'user1'")},
		{"key compared to a column", `SELECT * FROM warehouse WHERE w_id = w_tax`,
			one("select ro sharded=warehouse missing=warehouse.w_id")},
		{"key under case", `SELECT * FROM warehouse WHERE CASE WHEN w_id = 1 THEN true END`,
			one("select ro sharded=warehouse missing=warehouse.w_id")},
		{"schema-qualified table and alias", `SELECT * FROM public.warehouse AS w WHERE w.w_id = 7`,
			one("select ro sharded=warehouse keys=warehouse:7")},
		{"schema-qualified column", `SELECT * FROM public.warehouse WHERE public.warehouse.w_id = 7`,
			one("select ro sharded=warehouse keys=warehouse:7")},
		{"alias hides the name", `SELECT * FROM warehouse w WHERE warehouse.w_id = 7`,
			one("select ro sharded=warehouse missing=warehouse.w_id")},
		{"unknown table ignored", `SELECT * FROM audit_log a, warehouse w WHERE a.w_id = 1 AND w.w_id = 2`,
			one("select ro sharded=warehouse keys=warehouse:2")},
		{"range on a co-partitioned table", `SELECT * FROM district WHERE d_w_id < 4`,
			one("select ro sharded=district range=district:(,4)")},
		{"keys for one table, range for another", `SELECT * FROM district, usertable WHERE d_w_id = 1 AND ycsb_key >= 'a'`,
			one("select ro sharded=district,usertable keys=district:1 range=usertable:['a',)")},
		{"between symmetric is no range", `SELECT * FROM district WHERE d_w_id BETWEEN SYMMETRIC 4 AND 1`,
			one("select ro sharded=district missing=district.d_w_id")},
		{"limit all, offset", `SELECT * FROM warehouse WHERE w_id = 1 LIMIT ALL OFFSET 3`,
			one("select ro sharded=warehouse keys=warehouse:1")},
		{"limit parameter", `SELECT * FROM warehouse WHERE w_id = 1 LIMIT $1`,
			one("select ro sharded=warehouse keys=warehouse:1 params=1")},
		{"fetch first", `SELECT * FROM warehouse WHERE w_id > 1 ORDER BY w_id FETCH FIRST 4 ROWS ONLY`,
			one("select ro sharded=warehouse range=warehouse:(1,) order=w_id limit=4")},
	})
}

func TestJoins(t *testing.T) {
	runParse(t, []parseCase{
		{"left join carries the key to the right", `SELECT * FROM warehouse w LEFT JOIN district d ON d.d_w_id = w.w_id WHERE w.w_id = $1`,
			one("select ro sharded=district,warehouse keys=district:$1,warehouse:$1 params=1")},
		{"left join does not carry it to the left", `SELECT * FROM warehouse w LEFT JOIN district d ON d.d_w_id = w.w_id WHERE d.d_w_id = $1`,
			one("select ro sharded=district,warehouse keys=district:$1 missing=warehouse.w_id params=1")},
		{"left join condition does not restrict the left", `SELECT * FROM warehouse w LEFT JOIN district d ON d.d_w_id = w.w_id AND w.w_id = 3`,
			one("select ro sharded=district,warehouse missing=district.d_w_id")},
		{"left join condition restricts the right", `SELECT * FROM warehouse w LEFT JOIN district d ON d.d_w_id = 3 WHERE w.w_id = 3`,
			one("select ro sharded=district,warehouse keys=district:3,warehouse:3")},
		{"full join restricts neither", `SELECT * FROM warehouse w FULL JOIN district d ON d.d_w_id = w.w_id AND d.d_w_id = 3`,
			one("select ro sharded=district,warehouse missing=district.d_w_id")},
		{"using", `SELECT * FROM stock JOIN stock AS s2 USING (s_w_id, s_i_id) WHERE stock.s_w_id = 2`,
			one("select ro sharded=stock keys=stock:2")},
		{"chain of key joins", `SELECT * FROM orders o, order_line ol, customer c WHERE o.o_w_id = $1 AND ol.ol_w_id = o.o_w_id AND c.c_w_id = ol.ol_w_id`,
			one("select ro sharded=customer,order_line,orders keys=customer:$1,order_line:$1,orders:$1 params=1")},
		{"different roots do not join", `SELECT * FROM usertable u JOIN warehouse w ON u.ycsb_key = w.w_id WHERE w.w_id = 1`,
			one("select ro sharded=usertable,warehouse keys=warehouse:1 missing=usertable.ycsb_key")},
		{"self join needs both keys", `SELECT * FROM stock s1, stock s2 WHERE s1.s_w_id = 1 AND s2.s_i_id = s1.s_i_id`,
			one("select ro sharded=stock keys=stock:1 missing=stock.s_w_id")},
		{"ambiguous bare column", `SELECT * FROM stock s1, stock s2 WHERE s_w_id = 1`,
			one("select ro sharded=stock missing=stock.s_w_id")},
		{"key range carried by a join", `SELECT * FROM warehouse w JOIN district d ON d.d_w_id = w.w_id WHERE w.w_id >= 2 AND w.w_id < 4`,
			one("select ro sharded=district,warehouse range=warehouse:[2,4)")},
		{"update from", `UPDATE stock SET s_quantity = 0 FROM item WHERE s_i_id = i_id AND s_w_id = $1`,
			one("update sharded=stock ref=item keys=stock:$1 params=1")},
		{"delete using", `DELETE FROM new_order n USING orders o WHERE n.no_w_id = o.o_w_id AND o.o_w_id = 4 AND n.no_o_id = o.o_id`,
			one("delete sharded=new_order,orders keys=new_order:4,orders:4")},
	})
}
