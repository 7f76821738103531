package analyze

import (
	"fmt"
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// Parse analyses a query string against s: one Statement per statement it
// holds, in order (none for an empty or comment-only string). A string
// PostgreSQL's parser refuses returns an error and no statements; the
// router then lets a server answer it, so the client sees PostgreSQL's own
// message. Parse is pure and safe for concurrent use; most callers want
// (*Cache).Statements, which parses a given text once.
func Parse(sql string, s Schema) ([]*Statement, error) {
	tree, err := pg.Parse(sql)
	if err != nil {
		return nil, fmt.Errorf("analyze: parse: %w", err)
	}
	out := make([]*Statement, 0, len(tree.Stmts))
	for _, raw := range tree.Stmts {
		out = append(out, analyse(sql, raw, s))
	}
	return out, nil
}

// analyse builds the Statement of one RawStmt of sql.
func analyse(sql string, raw *pg.RawStmt, s Schema) *Statement {
	seg := segment(sql, raw)
	st := &Statement{Text: strings.TrimSpace(seg), Hint: hint(seg), Kind: OtherKind}
	st.NParams, st.Aggregate, st.ReadOnly = facts(raw.Stmt)
	switch n := raw.Stmt.GetNode().(type) {
	case *pg.Node_SelectStmt, *pg.Node_InsertStmt, *pg.Node_UpdateStmt, *pg.Node_DeleteStmt, *pg.Node_MergeStmt:
		st.Class = Plain
		tablesAndKeys(st, raw.Stmt, s)
	case *pg.Node_TransactionStmt:
		st.Class = transactionClass(n.TransactionStmt.Kind)
	case *pg.Node_VariableSetStmt:
		variableSet(st, n.VariableSetStmt)
	case *pg.Node_DeclareCursorStmt:
		// Routed by its query, which runs on the owners of its keys; the
		// cursor is then there.
		d := n.DeclareCursorStmt
		st.Cursor, st.CursorHold = d.Portalname, d.Options&cursorOptHold != 0
		st.NParams, st.Aggregate, st.ReadOnly = facts(d.Query)
		st.Class = Plain
		tablesAndKeys(st, d.Query, s)
	case *pg.Node_ExplainStmt:
		// EXPLAIN ANALYZE runs its statement: routed (and checked) as
		// that statement. A plain EXPLAIN runs nothing; any partition's
		// plan will do.
		e := n.ExplainStmt
		if !explainAnalyze(e) {
			st.Class = Other
			break
		}
		switch e.Query.GetNode().(type) {
		case *pg.Node_SelectStmt, *pg.Node_InsertStmt, *pg.Node_UpdateStmt, *pg.Node_DeleteStmt, *pg.Node_MergeStmt:
			st.NParams, st.Aggregate, st.ReadOnly = facts(e.Query)
			st.Class = Plain
			tablesAndKeys(st, e.Query, s)
		default: // EXPLAIN ANALYZE of CREATE TABLE AS, EXECUTE, …
			st.Class = Other
		}
	case *pg.Node_FetchStmt: // FETCH and MOVE: the DECLARE's query said whether it writes
		st.Class, st.Cursor, st.ReadOnly = CursorUse, n.FetchStmt.Portalname, true
	case *pg.Node_ClosePortalStmt:
		st.Class, st.Cursor, st.ReadOnly, st.CursorClose = CursorUse, n.ClosePortalStmt.Portalname, true, true
	default:
		st.Class = Other
	}
	return st
}

// segment is a RawStmt's own part of sql: from its location (the start of
// the string for the first statement, the byte after the previous ';'
// otherwise, so leading comments are in it) for its length (0: to the end).
func segment(sql string, raw *pg.RawStmt) string {
	from := int(raw.StmtLocation)
	if from < 0 || from > len(sql) {
		return ""
	}
	to := len(sql)
	if raw.StmtLen > 0 && from+int(raw.StmtLen) <= len(sql) {
		to = from + int(raw.StmtLen)
	}
	return sql[from:to]
}

func transactionClass(k pg.TransactionStmtKind) Class {
	switch k {
	case pg.TransactionStmtKind_TRANS_STMT_BEGIN, pg.TransactionStmtKind_TRANS_STMT_START:
		return Begin
	case pg.TransactionStmtKind_TRANS_STMT_COMMIT:
		return Commit
	case pg.TransactionStmtKind_TRANS_STMT_ROLLBACK:
		return Rollback
	case pg.TransactionStmtKind_TRANS_STMT_SAVEPOINT, pg.TransactionStmtKind_TRANS_STMT_RELEASE,
		pg.TransactionStmtKind_TRANS_STMT_ROLLBACK_TO:
		return Savepoint
	case pg.TransactionStmtKind_TRANS_STMT_PREPARE, pg.TransactionStmtKind_TRANS_STMT_COMMIT_PREPARED,
		pg.TransactionStmtKind_TRANS_STMT_ROLLBACK_PREPARED:
		return TwoPhase
	}
	return Other
}

// explainAnalyze tells whether an EXPLAIN's options say ANALYZE (ANALYZE,
// or (ANALYZE [true|on|1])).
func explainAnalyze(e *pg.ExplainStmt) bool {
	on := false
	for _, o := range e.Options {
		d := o.GetDefElem()
		if d == nil || !strings.EqualFold(d.Defname, "analyze") {
			continue
		}
		switch a := d.Arg.GetNode().(type) {
		case nil:
			on = true
		case *pg.Node_Boolean:
			on = a.Boolean.Boolval
		case *pg.Node_Integer:
			on = a.Integer.Ival != 0
		case *pg.Node_String_:
			v := strings.ToLower(a.String_.Sval)
			on = v == "true" || v == "on" || v == "yes" || v == "1"
		}
	}
	return on
}

// cursorOptHold is PostgreSQL's CURSOR_OPT_HOLD (parsenodes.h): WITH HOLD.
const cursorOptHold = 0x0020

// keyGUC is the setting a client names to give the router its key.
const keyGUC = "sluice.key"

// variableSet classifies SET and RESET: sluice.key is SetKey; a setting
// that outlives the transaction (SET [SESSION], RESET, RESET ALL, SET
// SESSION CHARACTERISTICS) is Session; SET LOCAL and SET TRANSACTION,
// which end with the transaction, are Other.
func variableSet(st *Statement, v *pg.VariableSetStmt) {
	if strings.EqualFold(v.Name, keyGUC) {
		st.Class = SetKey
		st.SetLocal = v.IsLocal
		if v.Kind == pg.VariableSetKind_VAR_SET_VALUE {
			vals := make([]string, 0, len(v.Args))
			for _, a := range v.Args {
				if val, ok := valueOf(a); ok {
					vals = append(vals, val.Const)
				}
			}
			st.SetValue = strings.Join(vals, ", ")
		}
		return
	}
	switch {
	case v.Kind == pg.VariableSetKind_VAR_SET_MULTI && v.Name == "TRANSACTION":
		st.Class = Other
	case v.IsLocal:
		st.Class = Other
	default:
		st.Class = Session
	}
}

// valueOf reads a constant or a parameter, under any casts and COLLATE.
func valueOf(n *pg.Node) (Value, bool) {
	for {
		switch x := n.GetNode().(type) {
		case *pg.Node_TypeCast:
			n = x.TypeCast.Arg
			continue
		case *pg.Node_CollateClause:
			n = x.CollateClause.Arg
			continue
		case *pg.Node_ParamRef:
			return Value{Param: int(x.ParamRef.Number)}, x.ParamRef.Number > 0
		case *pg.Node_AConst:
			c := x.AConst
			switch {
			case c.Isnull:
				return Value{}, false
			case c.GetIval() != nil:
				return Value{Const: strconv.FormatInt(int64(c.GetIval().Ival), 10)}, true
			case c.GetFval() != nil:
				return Value{Const: c.GetFval().Fval}, true
			case c.GetSval() != nil:
				return Value{Const: c.GetSval().Sval, IsString: true}, true
			}
		}
		return Value{}, false
	}
}
