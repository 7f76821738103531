package analyze

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicedb/sluice/keyspace"
)

// bench is the keyspace the tests analyse against: TPC-C-lite (warehouse
// and the tables that follow its w_id; item a reference table) and YCSB's
// usertable, keyed by text.
func bench(t testing.TB) *keyspace.Keyspace {
	t.Helper()
	ks := &keyspace.Keyspace{
		Name: "bench",
		Partitions: []keyspace.Partition{
			{Name: "p1", Tenant: "tenant-1"},
			{Name: "p2", Tenant: "tenant-2"},
		},
		Tables: []keyspace.Table{
			{Name: "warehouse", Kind: keyspace.Sharded, Column: "w_id", Type: keyspace.Int},
			{Name: "district", Kind: keyspace.CoPartitioned, Column: "d_w_id", Root: "warehouse"},
			{Name: "customer", Kind: keyspace.CoPartitioned, Column: "c_w_id", Root: "warehouse"},
			{Name: "history", Kind: keyspace.CoPartitioned, Column: "h_w_id", Root: "warehouse"},
			{Name: "orders", Kind: keyspace.CoPartitioned, Column: "o_w_id", Root: "warehouse"},
			{Name: "new_order", Kind: keyspace.CoPartitioned, Column: "no_w_id", Root: "warehouse"},
			{Name: "order_line", Kind: keyspace.CoPartitioned, Column: "ol_w_id", Root: "warehouse"},
			{Name: "stock", Kind: keyspace.CoPartitioned, Column: "s_w_id", Root: "warehouse"},
			{Name: "item", Kind: keyspace.Reference},
			{Name: "usertable", Kind: keyspace.Sharded, Column: "ycsb_key", Type: keyspace.Text},
		},
		Plan: keyspace.PlanSpec{
			"warehouse": {"p1": "[,5)", "p2": "[5,)"},
			"usertable": {"p1": "[,user5)", "p2": "[user5,)"},
		},
	}
	if err := ks.Validate(); err != nil {
		t.Fatal(err)
	}
	return ks
}

// describe renders a Statement on one line, naming only what is set:
//
//	select ro agg sharded=a,b ref=c keys=a:$1,b:'x',b:42 range=a:[$1,$2)
//	missing=a.k order=k desc limit=10 updkey hint=h set=v local cursor=c hold close
//	params=2
//
// A Plain statement shows its Kind, others their Class; string constants
// are quoted, arrays (key = ANY(…)) end in []; a range's brackets show its bounds' inclusion.
func describe(st *Statement) string {
	var b strings.Builder
	if st.Class == Plain {
		b.WriteString([]string{"select", "insert", "update", "delete", "plain-other"}[st.Kind])
	} else {
		b.WriteString([]string{"plain", "begin", "commit", "rollback", "savepoint", "setkey", "session", "twophase", "other", "cursor"}[st.Class])
	}
	flag := func(on bool, s string) {
		if on {
			b.WriteString(" " + s)
		}
	}
	list := func(name string, xs []string) {
		if len(xs) > 0 {
			fmt.Fprintf(&b, " %s=%s", name, strings.Join(xs, ","))
		}
	}
	flag(st.ReadOnly, "ro")
	flag(st.Aggregate, "agg")
	list("sharded", st.Sharded)
	list("ref", st.Reference)
	var keys []string
	for _, k := range st.Keys {
		keys = append(keys, k.Table+":"+showValue(&k.Value))
	}
	list("keys", keys)
	if r := st.Range; r != nil {
		lb, hb := "(", ")"
		if r.LoIncl {
			lb = "["
		}
		if r.HiIncl {
			hb = "]"
		}
		fmt.Fprintf(&b, " range=%s:%s%s,%s%s", r.Table, lb, showValue(r.Lo), showValue(r.Hi), hb)
	}
	flag(st.Missing != "", "missing="+st.Missing)
	flag(st.OrderKey != "", "order="+st.OrderKey)
	flag(st.OrderDesc, "desc")
	flag(st.Limit != 0, fmt.Sprintf("limit=%d", st.Limit))
	flag(st.UpdatesKey, "updkey")
	flag(st.Hint != "", "hint="+st.Hint)
	flag(st.SetValue != "", "set="+st.SetValue)
	flag(st.SetLocal, "local")
	flag(st.Cursor != "" || st.Class == CursorUse, "cursor="+st.Cursor)
	flag(st.CursorHold, "hold")
	flag(st.CursorClose, "close")
	flag(st.NParams != 0, fmt.Sprintf("params=%d", st.NParams))
	return b.String()
}

func showValue(v *Value) string {
	if v != nil && v.Array {
		w := *v
		w.Array = false
		return showValue(&w) + "[]"
	}
	switch {
	case v == nil:
		return ""
	case v.Param != 0:
		return fmt.Sprintf("$%d", v.Param)
	case v.IsString:
		return "'" + v.Const + "'"
	}
	return v.Const
}
