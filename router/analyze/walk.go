package analyze

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// walk calls fn on m and, depth first, on every message beneath it; fn
// returning false skips that message's children. It reaches every node of
// a parse tree whatever its type, so no kind of expression is missed.
func walk(m proto.Message, fn func(proto.Message) bool) {
	if m == nil {
		return
	}
	w := &walker{fn: fn}
	w.field = w.visitField // one closure per walk, not per message
	w.visit(m.ProtoReflect())
}

type walker struct {
	fn    func(proto.Message) bool
	field func(protoreflect.FieldDescriptor, protoreflect.Value) bool
}

func (w *walker) visit(m protoreflect.Message) {
	if m.IsValid() && w.fn(m.Interface()) {
		m.Range(w.field)
	}
}

func (w *walker) visitField(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
	if fd.Kind() != protoreflect.MessageKind || fd.IsMap() {
		return true
	}
	if fd.IsList() {
		l := v.List()
		for i := 0; i < l.Len(); i++ {
			w.visit(l.Get(i).Message())
		}
		return true
	}
	w.visit(v.Message())
	return true
}

// facts reads what a whole statement tree says regardless of tables: the
// highest parameter number; whether it aggregates anywhere (an aggregate or
// window function, GROUP BY, HAVING, DISTINCT, a set operation other than
// UNION ALL — in the statement or any subquery); and whether it is a
// read-only SELECT (no locking clause, no SELECT INTO, no data-modifying
// statement in a CTE).
func facts(stmt *pg.Node) (nparams int, aggregate, readOnly bool) {
	_, isSelect := stmt.GetNode().(*pg.Node_SelectStmt)
	writes := false
	walk(stmt, func(m proto.Message) bool {
		switch x := m.(type) {
		case *pg.ParamRef:
			nparams = max(nparams, int(x.Number))
		case *pg.FuncCall:
			if isAggregateCall(x) {
				aggregate = true
			}
		case *pg.JsonObjectAgg, *pg.JsonArrayAgg:
			aggregate = true
		case *pg.SelectStmt:
			if len(x.GroupClause) > 0 || x.HavingClause != nil || len(x.DistinctClause) > 0 || len(x.WindowClause) > 0 ||
				(x.Op != pg.SetOperation_SETOP_NONE && x.Op != pg.SetOperation_SET_OPERATION_UNDEFINED &&
					!(x.Op == pg.SetOperation_SETOP_UNION && x.All)) {
				aggregate = true
			}
			if len(x.LockingClause) > 0 || x.IntoClause != nil {
				writes = true
			}
		case *pg.InsertStmt, *pg.UpdateStmt, *pg.DeleteStmt, *pg.MergeStmt:
			writes = true
		}
		return true
	})
	return nparams, aggregate, isSelect && !writes
}

// isAggregateCall tells an aggregate or window function call: OVER, a star,
// DISTINCT, ORDER BY, FILTER or WITHIN GROUP in the call, or the name of
// one of PostgreSQL's built-in aggregates. A user-defined aggregate called
// plainly is not recognised.
func isAggregateCall(f *pg.FuncCall) bool {
	if f.Over != nil || f.AggStar || f.AggDistinct || f.AggWithinGroup || f.AggFilter != nil || len(f.AggOrder) > 0 {
		return true
	}
	if len(f.Funcname) == 0 {
		return false
	}
	name := strings.ToLower(f.Funcname[len(f.Funcname)-1].GetString_().GetSval())
	return aggregates[name]
}

// aggregates are PostgreSQL's built-in aggregate functions.
var aggregates = map[string]bool{
	"any_value": true, "array_agg": true, "avg": true, "bit_and": true, "bit_or": true, "bit_xor": true,
	"bool_and": true, "bool_or": true, "count": true, "every": true, "json_agg": true, "json_agg_strict": true,
	"json_object_agg": true, "json_object_agg_strict": true, "json_object_agg_unique": true,
	"json_object_agg_unique_strict": true, "jsonb_agg": true, "jsonb_agg_strict": true,
	"jsonb_object_agg": true, "jsonb_object_agg_strict": true, "jsonb_object_agg_unique": true,
	"jsonb_object_agg_unique_strict": true, "max": true, "min": true, "range_agg": true,
	"range_intersect_agg": true, "string_agg": true, "sum": true, "xmlagg": true,
	"corr": true, "covar_pop": true, "covar_samp": true, "regr_avgx": true, "regr_avgy": true,
	"regr_count": true, "regr_intercept": true, "regr_r2": true, "regr_slope": true, "regr_sxx": true,
	"regr_sxy": true, "regr_syy": true, "stddev": true, "stddev_pop": true, "stddev_samp": true,
	"variance": true, "var_pop": true, "var_samp": true,
	"mode": true, "percentile_cont": true, "percentile_disc": true,
}
