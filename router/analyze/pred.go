package analyze

import (
	"slices"

	pg "github.com/pganalyze/pg_query_go/v6"
	"github.com/sluicedb/sluice/keyspace"
)

// where reads the conjuncts of a WHERE or ON condition at query level sc:
// key equalities, IN lists and ORs of them give entries keys, range
// comparisons give range bounds, and equalities between the keys of two
// co-partitioned entries give edges. Only conjuncts of the top-level AND
// count: a key under NOT, or in a CASE, says nothing of the rows read.
// restricted lists the entries whose rows the condition restricts; nil
// means all of sc's (a WHERE).
func (a *analysis) where(sc *scope, n *pg.Node, restricted []int) {
	if n == nil {
		return
	}
	if b := n.GetBoolExpr(); b != nil && b.Boolop == pg.BoolExprType_AND_EXPR {
		for _, arg := range b.Args {
			a.where(sc, arg, restricted)
		}
		return
	}
	applies := func(e int) bool { return restricted == nil || slices.Contains(restricted, e) }
	if ax := n.GetAExpr(); ax != nil && ax.Kind == pg.A_Expr_Kind_AEXPR_OP && opName(ax) == "=" {
		l, lok := a.keyColumn(sc, ax.Lexpr)
		r, rok := a.keyColumn(sc, ax.Rexpr)
		if lok && rok {
			a.join(l, r, restricted)
			return
		}
	}
	if a.bound(sc, n, applies) {
		return
	}
	for _, k := range a.keysOf(sc, n) {
		if applies(k.entry) {
			e := a.entries[k.entry]
			e.keys = append(e.keys, k.value)
		}
	}
}

// join adds the edges of an equality of entries i's and j's keys when
// their tables are co-partitioned (share a root): keys of one then place
// the other's rows. An edge leads only to an entry whose rows the
// condition restricts (restricted; nil: all).
func (a *analysis) join(i, j int, restricted []int) {
	if i == j || a.entries[i].table.Root != a.entries[j].table.Root {
		return
	}
	if restricted == nil || slices.Contains(restricted, j) {
		a.edges = append(a.edges, edge{from: i, to: j})
	}
	if restricted == nil || slices.Contains(restricted, i) {
		a.edges = append(a.edges, edge{from: j, to: i})
	}
}

// keyAt is one value an expression restricts an entry's key to.
type keyAt struct {
	entry int
	value Value
}

// keysOf returns the key values a boolean expression restricts entries
// to: key = v (either way round), key IN (v, …), key = ANY(array) (see
// arrayValues), an AND (the keys of any
// of its conjuncts) and an OR (for an entry every disjunct restricts, the
// union of their values). v is a constant or a parameter, under casts.
func (a *analysis) keysOf(sc *scope, n *pg.Node) []keyAt {
	if b := n.GetBoolExpr(); b != nil {
		switch b.Boolop {
		case pg.BoolExprType_AND_EXPR:
			var out []keyAt
			for _, arg := range b.Args {
				out = append(out, a.keysOf(sc, arg)...)
			}
			return out
		case pg.BoolExprType_OR_EXPR:
			return a.keysOfOr(sc, b.Args)
		}
		return nil
	}
	ax := n.GetAExpr()
	if ax == nil || opName(ax) != "=" {
		return nil
	}
	switch ax.Kind {
	case pg.A_Expr_Kind_AEXPR_OP:
		if e, ok := a.keyColumn(sc, ax.Lexpr); ok {
			if v, ok := valueOf(ax.Rexpr); ok {
				return []keyAt{{e, v}}
			}
		}
		if e, ok := a.keyColumn(sc, ax.Rexpr); ok {
			if v, ok := valueOf(ax.Lexpr); ok {
				return []keyAt{{e, v}}
			}
		}
	case pg.A_Expr_Kind_AEXPR_OP_ANY: // key = ANY(array)
		e, ok := a.keyColumn(sc, ax.Lexpr)
		if !ok {
			return nil
		}
		vs, ok := arrayValues(ax.Rexpr)
		if !ok {
			return nil
		}
		out := make([]keyAt, len(vs))
		for i, v := range vs {
			out[i] = keyAt{e, v}
		}
		return out
	case pg.A_Expr_Kind_AEXPR_IN: // "=" for IN, "<>" for NOT IN
		e, ok := a.keyColumn(sc, ax.Lexpr)
		if !ok {
			return nil
		}
		items := ax.Rexpr.GetList().GetItems()
		out := make([]keyAt, 0, len(items))
		for _, it := range items {
			v, ok := valueOf(it)
			if !ok {
				return nil // an item that is not a value: any key may match
			}
			out = append(out, keyAt{e, v})
		}
		return out
	}
	return nil
}

// arrayValues reads the array of key = ANY(array), under casts: an
// ARRAY[v, …] constructor gives its elements (nested ones for a
// multidimensional array; each a constant or parameter, else not ok); a
// parameter or a string constant ('{1,2}') gives one Value with Array set,
// whose elements KeysOf reads.
func arrayValues(n *pg.Node) ([]Value, bool) {
	for {
		switch x := n.GetNode().(type) {
		case *pg.Node_TypeCast:
			n = x.TypeCast.Arg
			continue
		case *pg.Node_AArrayExpr:
			var out []Value
			for _, el := range x.AArrayExpr.Elements {
				if el.GetAArrayExpr() != nil {
					vs, ok := arrayValues(el)
					if !ok {
						return nil, false
					}
					out = append(out, vs...)
					continue
				}
				v, ok := valueOf(el)
				if !ok {
					return nil, false
				}
				out = append(out, v)
			}
			return out, true
		}
		v, ok := valueOf(n)
		if !ok || (v.Param == 0 && !v.IsString) {
			return nil, false // a number is no array: the server refuses it
		}
		v.Array = true
		return []Value{v}, true
	}
}

// keysOfOr returns, for each entry every disjunct restricts, the union of
// their values.
func (a *analysis) keysOfOr(sc *scope, args []*pg.Node) []keyAt {
	var out []keyAt
	for i, arg := range args {
		ks := a.keysOf(sc, arg)
		if i == 0 {
			out = ks
			continue
		}
		var kept []keyAt
		for _, k := range out {
			if slices.ContainsFunc(ks, func(o keyAt) bool { return o.entry == k.entry }) {
				kept = append(kept, k)
			}
		}
		for _, k := range ks {
			if slices.ContainsFunc(out, func(o keyAt) bool { return o.entry == k.entry }) {
				kept = append(kept, k)
			}
		}
		out = kept
	}
	return out
}

// bound reads a range comparison of a key (key < v, v >= key, key BETWEEN
// v AND w) into its entry's bounds; the first lower and the first upper
// bound of an entry are kept (any one bound gives a superset of the rows).
// It reports whether n was a range comparison.
func (a *analysis) bound(sc *scope, n *pg.Node, applies func(int) bool) bool {
	ax := n.GetAExpr()
	if ax == nil {
		return false
	}
	switch ax.Kind {
	case pg.A_Expr_Kind_AEXPR_BETWEEN:
		e, ok := a.keyColumn(sc, ax.Lexpr)
		items := ax.Rexpr.GetList().GetItems()
		if !ok || len(items) != 2 {
			return false
		}
		lo, lok := valueOf(items[0])
		hi, hok := valueOf(items[1])
		if !lok || !hok {
			return false
		}
		if applies(e) {
			a.setLo(e, lo, true)
			a.setHi(e, hi, true)
		}
		return true
	case pg.A_Expr_Kind_AEXPR_OP:
		op := opName(ax)
		if op != "<" && op != "<=" && op != ">" && op != ">=" {
			return false
		}
		e, ok := a.keyColumn(sc, ax.Lexpr)
		v, vok := valueOf(ax.Rexpr)
		if !ok || !vok {
			if e, ok = a.keyColumn(sc, ax.Rexpr); !ok {
				return false
			}
			if v, vok = valueOf(ax.Lexpr); !vok {
				return false
			}
			op = flip[op]
		}
		if applies(e) {
			switch op {
			case ">", ">=":
				a.setLo(e, v, op == ">=")
			default:
				a.setHi(e, v, op == "<=")
			}
		}
		return true
	}
	return false
}

var flip = map[string]string{"<": ">", "<=": ">=", ">": "<", ">=": "<="}

func (a *analysis) setLo(e int, v Value, incl bool) {
	if en := a.entries[e]; en.lo == nil {
		en.lo, en.loIncl = &v, incl
	}
}

func (a *analysis) setHi(e int, v Value, incl bool) {
	if en := a.entries[e]; en.hi == nil {
		en.hi, en.hiIncl = &v, incl
	}
}

// opName is an operator's name without its schema (OPERATOR(pg_catalog.=)).
func opName(ax *pg.A_Expr) string {
	if len(ax.Name) == 0 {
		return ""
	}
	return ax.Name[len(ax.Name)-1].GetString_().GetSval()
}

// keyColumn resolves a column reference to the entry of sc whose key
// column it names: table.column (or schema.table.column) by the entry's
// alias or name, or a bare column when exactly one entry of sc has a key
// column of that name. Columns of other query levels are not resolved.
func (a *analysis) keyColumn(sc *scope, n *pg.Node) (int, bool) {
	cr := n.GetColumnRef()
	if cr == nil {
		return 0, false
	}
	f := cr.Fields
	if len(f) == 0 {
		return 0, false
	}
	col := f[len(f)-1].GetString_()
	if col == nil {
		return 0, false // t.*
	}
	if len(f) == 1 {
		return a.onlyKeyColumn(sc.entries, col.Sval)
	}
	ref := f[len(f)-2].GetString_().GetSval()
	for _, i := range sc.entries {
		e := a.entries[i]
		if e.ref == ref {
			return i, isKey(e.table, col.Sval)
		}
	}
	return 0, false
}

// onlyKeyColumn returns the one entry among es whose key column is col.
func (a *analysis) onlyKeyColumn(es []int, col string) (int, bool) {
	found, n := 0, 0
	for _, i := range es {
		if isKey(a.entries[i].table, col) {
			found, n = i, n+1
		}
	}
	return found, n == 1
}

func isKey(t *keyspace.Table, col string) bool {
	return t.Kind != keyspace.Reference && t.Column == col
}
