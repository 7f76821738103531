package agent

import (
	"fmt"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/reshard/pgreshard"
)

// The SQL the keyspace endpoints run on a partition, built from a validated
// keyspace only: identifiers are quoted, keys are SQL literals of the
// table's key type, text compares under the "C" collation as the plan's
// keys do (package keyspace).

// quoteIdent quotes an SQL identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// misplacedSQL counts table t's rows and those whose key is not in rs
// (NULL keys included: the plan owns no NULL).
func misplacedSQL(t keyspace.Table, rs []keyspace.Range) string {
	return fmt.Sprintf("SELECT count(*), count(*) FILTER (WHERE (%s) IS NOT TRUE) FROM %s",
		pgreshard.RangePredicate(t.Column, t.Type, rs), quoteIdent(t.Name))
}

// referenceSQL counts reference table t's rows and digests them: md5 of
// their text forms sorted bytewise, joined by newlines.
func referenceSQL(t keyspace.Table) string {
	return fmt.Sprintf(`SELECT count(*), md5(coalesce(string_agg(r::text, E'\n' ORDER BY r::text COLLATE "C"), '')) FROM %s AS r`,
		quoteIdent(t.Name))
}

// rangesText is rs as the plan writes them: "[1,4),[9,12)".
func rangesText(rs []keyspace.Range) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ",")
}

// checkSchema parses a keyspace's schema with PostgreSQL's parser and
// refuses what would break its all-or-nothing application (it runs inside
// a transaction that is then prepared): a syntax error, or a statement
// that ends or controls the transaction.
func checkSchema(sql string) error {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return fmt.Errorf("schema: %v", err)
	}
	for _, st := range tree.Stmts {
		if tx := st.Stmt.GetTransactionStmt(); tx != nil {
			return fmt.Errorf("schema: transaction control (%s) is not allowed: the schema is applied in one transaction per partition",
				strings.TrimPrefix(tx.Kind.String(), "TRANS_STMT_"))
		}
	}
	return nil
}
