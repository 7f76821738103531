package analyze

import (
	"cmp"
	"slices"
	"strconv"

	pg "github.com/pganalyze/pg_query_go/v6"
	"github.com/sluicedb/sluice/keyspace"
)

// finish turns the entries into st's tables, keys, range and Missing:
//
//  1. keys propagate along edges to entries without keys of their own;
//  2. Keys lists every entry's keys by table (sorted), each once;
//  3. among entries without keys (by table name), the first with a range
//     of its own gives Range, which covers it and, along edges, the
//     entries without keys joined to it on the key;
//  4. Missing names the first entry (by table name) covered by neither.
func (a *analysis) finish(st *Statement) {
	st.UpdatesKey = a.updKey
	for changed := true; changed; {
		changed = false
		for _, ed := range a.edges {
			from, to := a.entries[ed.from], a.entries[ed.to]
			if len(from.keys) > 0 && len(to.keys) == 0 && !to.missed {
				to.keys, changed = from.keys, true
			}
		}
	}
	order := make([]int, len(a.entries))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int {
		return cmp.Compare(a.entries[i].table.Name, a.entries[j].table.Name)
	})

	seen := map[KeyRef]bool{}
	for _, i := range order {
		e := a.entries[i]
		if e.table.Kind == keyspace.Reference {
			st.Reference = appendOnce(st.Reference, e.table.Name)
			continue
		}
		st.Sharded = appendOnce(st.Sharded, e.table.Name)
		for _, v := range e.keys {
			k := KeyRef{Table: e.table.Name, Value: v}
			if !seen[k] {
				seen[k] = true
				st.Keys = append(st.Keys, k)
			}
		}
	}
	a.rangeCover(st, order)
	for _, i := range order {
		e := a.entries[i]
		if e.table.Kind != keyspace.Reference && (len(e.keys) == 0 || e.missed) && e.ranged == nil {
			st.Missing = e.table.Name + "." + e.table.Column
			return
		}
	}
}

// rangeCover sets st.Range from the first entry (in order) without keys
// that has a range, and marks the entries it covers.
func (a *analysis) rangeCover(st *Statement, order []int) {
	for _, i := range order {
		e := a.entries[i]
		if e.table.Kind == keyspace.Reference || len(e.keys) > 0 || (e.lo == nil && e.hi == nil) {
			continue
		}
		st.Range = &RangeRef{Table: e.table.Name, Lo: e.lo, Hi: e.hi, LoIncl: e.loIncl, HiIncl: e.hiIncl}
		e.ranged = e
		for changed := true; changed; {
			changed = false
			for _, ed := range a.edges {
				from, to := a.entries[ed.from], a.entries[ed.to]
				if from.ranged == e && to.ranged == nil && len(to.keys) == 0 {
					to.ranged, changed = e, true
				}
			}
		}
		return
	}
}

// appendOnce appends s to a sorted list unless it is its last element.
func appendOnce(list []string, s string) []string {
	if len(list) > 0 && list[len(list)-1] == s {
		return list
	}
	return append(list, s)
}

// order reads a SELECT's LIMIT and, when its first ORDER BY item is the key
// column of a sharded table of its FROM that the output holds (by *, t.*,
// or the column itself, perhaps renamed), OrderKey and OrderDesc. The
// item may name the column, the output column's name, or its position.
// sc is the SELECT's level (nil for a set operation: no OrderKey).
func (a *analysis) order(st *Statement, sel *pg.SelectStmt, sc *scope) {
	if sel.LimitOption != pg.LimitOption_LIMIT_OPTION_WITH_TIES {
		st.Limit, _ = constInt(sel.LimitCount)
	}
	if sc == nil || len(sel.SortClause) == 0 {
		return
	}
	sb := sel.SortClause[0].GetSortBy()
	expr, name := sb.GetNode(), ""
	if i, ok := constInt(expr); ok && i >= 1 && i <= int64(len(sel.TargetList)) {
		rt := sel.TargetList[i-1].GetResTarget()
		expr, name = rt.GetVal(), rt.GetName()
	} else if f := expr.GetColumnRef().GetFields(); len(f) == 1 {
		for _, t := range sel.TargetList {
			if rt := t.GetResTarget(); rt.GetName() != "" && rt.GetName() == f[0].GetString_().GetSval() {
				expr, name = rt.GetVal(), rt.GetName()
				break
			}
		}
	}
	e, ok := a.keyColumn(sc, expr)
	if !ok {
		return
	}
	if name == "" {
		name = a.outputName(sc, sel.TargetList, e)
	}
	st.OrderKey = name
	st.OrderDesc = name != "" && sb.GetSortbyDir() == pg.SortByDir_SORTBY_DESC
}

// outputName is the name under which a SELECT's output holds entry e's key
// column, "" when it does not.
func (a *analysis) outputName(sc *scope, targets []*pg.Node, e int) string {
	col := a.entries[e].table.Column
	for _, t := range targets {
		rt := t.GetResTarget()
		f := rt.GetVal().GetColumnRef().GetFields()
		if len(f) > 0 && f[len(f)-1].GetAStar() != nil {
			if len(f) == 1 || f[len(f)-2].GetString_().GetSval() == a.entries[e].ref {
				return col
			}
			continue
		}
		if i, ok := a.keyColumn(sc, rt.GetVal()); ok && i == e {
			return cmp.Or(rt.GetName(), col)
		}
	}
	return ""
}

// constInt reads an integer constant (under casts).
func constInt(n *pg.Node) (int64, bool) {
	v, ok := valueOf(n)
	if !ok || v.Param != 0 || v.IsString {
		return 0, false
	}
	i, err := strconv.ParseInt(v.Const, 10, 64)
	return i, err == nil
}
