package analyze

import (
	"slices"

	pg "github.com/pganalyze/pg_query_go/v6"
	"github.com/sluicedb/sluice/keyspace"
	"google.golang.org/protobuf/proto"
)

// entry is one use of a keyspace table in a statement (a FROM or USING
// item, or a DML target): a range table entry. A table named twice (a
// self-join) is two entries, each needing its own keys.
type entry struct {
	ref   string // what the statement calls it: its alias, else its name
	table *keyspace.Table
	scope int // the query level that names it

	keys   []Value // values its key column is restricted to (own or propagated)
	missed bool    // an INSERT row whose key the statement does not name

	lo, hi         *Value // its own range bounds, when it has no keys
	loIncl, hiIncl bool
	ranged         *entry // the entry whose range covers this one, if any
}

// edge says entry to's key equals entry from's (a co-partitioned join on
// the key) where that restricts to's rows: keys found for from cover to.
type edge struct{ from, to int }

// analysis gathers the tables and keys of one Plain statement.
type analysis struct {
	schema  Schema
	entries []*entry
	edges   []edge
	scopes  int
	updKey  bool // a key column is assigned
}

// ctes are the WITH names visible at a query level: a FROM item of that
// name (unqualified) is the CTE, not a table.
type ctes struct {
	names []string
	up    *ctes
}

func (c *ctes) has(name string) bool {
	for ; c != nil; c = c.up {
		if slices.Contains(c.names, name) {
			return true
		}
	}
	return false
}

// scope is one query level: the entries its FROM (or target) names.
type scope struct {
	id      int
	entries []int
}

func (a *analysis) newScope() *scope {
	a.scopes++
	return &scope{id: a.scopes}
}

// tablesAndKeys fills st's tables, keys, range and Missing from the
// Plain statement stmt.
func tablesAndKeys(st *Statement, stmt *pg.Node, s Schema) {
	a := &analysis{schema: s}
	top := a.query(stmt, nil)
	switch stmt.GetNode().(type) {
	case *pg.Node_SelectStmt:
		st.Kind = Select
		a.order(st, stmt.GetSelectStmt(), top)
	case *pg.Node_InsertStmt:
		st.Kind = Insert
	case *pg.Node_UpdateStmt:
		st.Kind = Update
	case *pg.Node_DeleteStmt:
		st.Kind = Delete
	}
	a.finish(st)
}

// query analyses a statement at a new query level: its tables, the keys
// its WHERE names for them, and its subqueries at levels of their own. It
// returns the level of a SELECT without set operations, else nil.
func (a *analysis) query(n *pg.Node, c *ctes) *scope {
	switch x := n.GetNode().(type) {
	case *pg.Node_SelectStmt:
		return a.selectStmt(x.SelectStmt, c)
	case *pg.Node_InsertStmt:
		a.insert(x.InsertStmt, c)
	case *pg.Node_UpdateStmt:
		u := x.UpdateStmt
		c = a.with(u.WithClause, c)
		sc := a.newScope()
		t := a.target(sc, u.Relation, c)
		a.assigns(t, u.TargetList)
		a.from(sc, u.FromClause, c)
		a.where(sc, u.WhereClause, nil)
		a.subqueries(c, u.TargetList, u.WhereClause, u.ReturningList)
	case *pg.Node_DeleteStmt:
		d := x.DeleteStmt
		c = a.with(d.WithClause, c)
		sc := a.newScope()
		a.target(sc, d.Relation, c)
		a.from(sc, d.UsingClause, c)
		a.where(sc, d.WhereClause, nil)
		a.subqueries(c, d.WhereClause, d.ReturningList)
	case *pg.Node_MergeStmt:
		// MERGE's tables are known, its keys are not looked for.
		m := x.MergeStmt
		c = a.with(m.WithClause, c)
		sc := a.newScope()
		a.target(sc, m.Relation, c)
		a.fromItem(sc, m.SourceRelation, c)
		a.subqueries(c, m.JoinCondition, m.MergeWhenClauses, m.ReturningList)
	}
	return nil
}

// with analyses a WITH clause's queries, each at its own level, and
// returns the names visible to the statement (and to the CTEs themselves).
func (a *analysis) with(w *pg.WithClause, c *ctes) *ctes {
	if w == nil {
		return c
	}
	inner := &ctes{up: c}
	for _, n := range w.Ctes {
		inner.names = append(inner.names, n.GetCommonTableExpr().GetCtename())
	}
	for _, n := range w.Ctes {
		a.query(n.GetCommonTableExpr().GetCtequery(), inner)
	}
	return inner
}

// selectStmt analyses a SELECT (or VALUES) and returns its level; nil for
// a set operation, whose operands are levels of their own.
func (a *analysis) selectStmt(s *pg.SelectStmt, c *ctes) *scope {
	if s == nil {
		return nil
	}
	c = a.with(s.WithClause, c)
	if s.Larg != nil || s.Rarg != nil {
		a.selectStmt(s.Larg, c)
		a.selectStmt(s.Rarg, c)
		a.subqueries(c, s.SortClause, s.LimitCount, s.LimitOffset)
		return nil
	}
	sc := a.newScope()
	a.from(sc, s.FromClause, c)
	a.where(sc, s.WhereClause, nil)
	a.subqueries(c, s.TargetList, s.WhereClause, s.GroupClause, s.HavingClause, s.WindowClause,
		s.SortClause, s.ValuesLists, s.LimitCount, s.LimitOffset, s.DistinctClause)
	return sc
}

// insert analyses INSERT: the target's keys are the key column's values in
// each VALUES row, or the key column's item of a plain INSERT … SELECT when
// that is a constant or parameter. Without a column list the key column's
// position is unknown, so the target is missed.
func (a *analysis) insert(ins *pg.InsertStmt, c *ctes) {
	c = a.with(ins.WithClause, c)
	sc := a.newScope()
	t := a.target(sc, ins.Relation, c)
	if oc := ins.OnConflictClause; oc != nil {
		a.assigns(t, oc.TargetList)
		a.subqueries(c, oc.TargetList, oc.WhereClause)
	}
	a.subqueries(c, ins.ReturningList)
	sel := ins.SelectStmt.GetSelectStmt()
	a.selectStmt(sel, c)
	if t == nil || t.table.Kind == keyspace.Reference {
		return
	}
	col := -1
	for i, n := range ins.Cols {
		if n.GetResTarget().GetName() == t.table.Column {
			col = i
		}
	}
	switch {
	case sel == nil || col < 0 || sel.Larg != nil:
		t.missed = true
	case len(sel.ValuesLists) > 0:
		for _, row := range sel.ValuesLists {
			a.insertValue(t, row.GetList().GetItems(), col)
		}
	default:
		items := make([]*pg.Node, len(sel.TargetList))
		for i, rt := range sel.TargetList {
			items[i] = rt.GetResTarget().GetVal()
		}
		a.insertValue(t, items, col)
	}
}

func (a *analysis) insertValue(t *entry, items []*pg.Node, col int) {
	if col >= len(items) {
		t.missed = true
		return
	}
	v, ok := valueOf(items[col])
	if !ok {
		t.missed = true
		return
	}
	t.keys = append(t.keys, v)
}

// target adds a DML statement's target table to sc; nil when the keyspace
// does not know it.
func (a *analysis) target(sc *scope, rv *pg.RangeVar, c *ctes) *entry {
	if i, ok := a.rangeVar(sc, rv, c); ok {
		return a.entries[i]
	}
	return nil
}

// assigns notes an UPDATE (or ON CONFLICT DO UPDATE) that sets t's key.
func (a *analysis) assigns(t *entry, targets []*pg.Node) {
	if t == nil || t.table.Kind == keyspace.Reference {
		return
	}
	for _, n := range targets {
		if n.GetResTarget().GetName() == t.table.Column {
			a.updKey = true
		}
	}
}

// rangeVar adds a table reference to sc when the keyspace knows the table
// (by its relation name, whatever its schema) and no CTE shadows it.
func (a *analysis) rangeVar(sc *scope, rv *pg.RangeVar, c *ctes) (int, bool) {
	if rv == nil || (rv.Schemaname == "" && c.has(rv.Relname)) {
		return 0, false
	}
	t, ok := a.schema.Table(rv.Relname)
	if !ok {
		return 0, false
	}
	ref := rv.Relname
	if rv.Alias != nil && rv.Alias.Aliasname != "" {
		ref = rv.Alias.Aliasname
	}
	a.entries = append(a.entries, &entry{ref: ref, table: t, scope: sc.id})
	i := len(a.entries) - 1
	sc.entries = append(sc.entries, i)
	return i, true
}

func (a *analysis) from(sc *scope, items []*pg.Node, c *ctes) {
	for _, n := range items {
		a.fromItem(sc, n, c)
	}
}

// fromItem adds a FROM item's tables to sc and returns their entries. A
// join's ON condition restricts the rows of both sides of an inner join,
// of the right side of a LEFT join, of the left side of a RIGHT join, and
// of neither side of a FULL join: keys and join edges count only for the
// entries it restricts. A subquery in FROM is a query level of its own.
func (a *analysis) fromItem(sc *scope, n *pg.Node, c *ctes) []int {
	switch x := n.GetNode().(type) {
	case *pg.Node_RangeVar:
		if i, ok := a.rangeVar(sc, x.RangeVar, c); ok {
			return []int{i}
		}
	case *pg.Node_RangeTableSample:
		return a.fromItem(sc, x.RangeTableSample.Relation, c)
	case *pg.Node_RangeSubselect:
		a.query(x.RangeSubselect.Subquery, c)
	case *pg.Node_RangeFunction:
		a.subqueries(c, x.RangeFunction.Functions)
	case *pg.Node_JoinExpr:
		j := x.JoinExpr
		l := a.fromItem(sc, j.Larg, c)
		r := a.fromItem(sc, j.Rarg, c)
		both := append(slices.Clip(l), r...)
		var restricted []int
		switch j.Jointype {
		case pg.JoinType_JOIN_INNER:
			restricted = both
		case pg.JoinType_JOIN_LEFT:
			restricted = r
		case pg.JoinType_JOIN_RIGHT:
			restricted = l
		}
		if restricted == nil {
			restricted = []int{} // nothing restricted, as against nil: everything
		}
		a.where(sc, j.Quals, restricted)
		a.using(sc, j.UsingClause, l, r, restricted)
		a.subqueries(c, j.Quals)
		return both
	}
	return nil
}

// using adds the edges of JOIN … USING (col) when col is the key column of
// exactly one entry on each side.
func (a *analysis) using(sc *scope, cols []*pg.Node, l, r, restricted []int) {
	for _, n := range cols {
		col := n.GetString_().GetSval()
		li, lok := a.onlyKeyColumn(l, col)
		ri, rok := a.onlyKeyColumn(r, col)
		if lok && rok {
			a.join(li, ri, restricted)
		}
	}
}

// subqueries analyses, each at its own level, the queries nested in
// expressions (scalar, EXISTS, IN and ANY subqueries). Each argument is a
// *pg.Node, a []*pg.Node or nil.
func (a *analysis) subqueries(c *ctes, exprs ...any) {
	visit := func(m proto.Message) bool {
		if s, ok := m.(*pg.SelectStmt); ok {
			a.selectStmt(s, c)
			return false
		}
		return true
	}
	for _, e := range exprs {
		switch x := e.(type) {
		case *pg.Node:
			if x != nil {
				walk(x, visit)
			}
		case []*pg.Node:
			for _, n := range x {
				walk(n, visit)
			}
		}
	}
}
