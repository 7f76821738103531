package analyze

import "testing"

// FuzzParse: no query string makes Parse panic, and every statement's
// text is part of the string.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		benchQuery,
		`SELECT * FROM usertable WHERE ycsb_key >= $1 ORDER BY 1 DESC LIMIT 10`,
		`INSERT INTO usertable (field0, ycsb_key) VALUES ('a', 'user1'), ($1, $2) ON CONFLICT DO NOTHING`,
		`WITH d AS (DELETE FROM new_order WHERE no_w_id = $1 RETURNING *) SELECT * FROM d, stock s LEFT JOIN item i USING (i_id)`,
		"/* sluice.key=4 */ BEGIN; SET LOCAL sluice.key = 3; UPDATE stock SET s_w_id = 2 WHERE s_w_id IN (1, $3) OR s_w_id BETWEEN 1 AND 2",
	} {
		f.Add(s)
	}
	ks := bench(f)
	f.Fuzz(func(t *testing.T, sql string) {
		stmts, err := Parse(sql, ks)
		if err != nil {
			return
		}
		for _, st := range stmts {
			if len(st.Text) > len(sql) {
				t.Fatalf("statement text %q longer than %q", st.Text, sql)
			}
		}
	})
}
