// Package analyze reads SQL the way the keyspace router needs it: for each
// statement of a query string, what it is to a transaction (Class), which
// keyspace tables it touches, and which keys of theirs it names, so that
// the router can send it to the partitions owning them. It parses with
// PostgreSQL's own parser (pg_query), so it reads exactly the language the
// servers read; a string the parser refuses is an error, and the router
// lets a server answer it with PostgreSQL's message.
//
// Everything here is pure: text and a Schema in, Statements out. Parse
// analyses one query string; a Cache keyed by the exact text parses each
// text once (the text of a prepared statement, a repeated simple query).
// KeyOf turns a Value into a keyspace.Key once Bind has given the
// parameters; KeysOf does the same for any Value, an array's included
// (every element a key). Statements are immutable and shared.
//
// # The router's contract
//
// A Plain statement's rows lie on the owners of its Keys, plus the owners
// of its Range when there is one. When Missing is set, some sharded table
// is covered by neither and the statement may touch any partition: the
// router needs a hint (SET sluice.key, a comment) or refuses it. Every
// rule below errs towards Missing: a key is reported only when the
// statement cannot touch that table's rows outside it.
//
// Recognised:
//
//   - Keys: key = v and v = key, where v is a constant or a parameter under
//     any casts (w_id = $1::int, '5'::bigint = w_id); key IN (v, …);
//     key = ANY(array), where the array is an ARRAY[v, …] constructor
//     (its elements are Keys like an IN list's, nested constructors
//     flattened), or a parameter or string constant ('{1,2}') under any
//     casts, which gives one KeyRef whose Value has Array set: its
//     elements, read from Bind's parameter (text or binary) or the
//     constant by KeysOf, are the keys; an OR
//     whose every branch names keys for a table (their union); an AND any
//     of whose conjuncts does. Only the conjuncts of a WHERE's (or inner
//     join ON's) top-level AND count: nothing under NOT, CASE or a function.
//   - Columns: table.key, alias.key and schema.table.key, or a bare key
//     column when exactly one table of that query level has it. Tables are
//     known by relation name whatever their schema; tables the Schema does
//     not know (catalogs, views, temporary tables) and WITH names that
//     shadow a table are ignored.
//   - Joins: a.key = b.key between co-partitioned tables (same root) lets
//     keys found for one cover the other, at the top level of WHERE or ON.
//     An outer join's ON restricts only its nullable side, so a key there
//     (and a join carrying keys) counts only for that side; a FULL join's
//     ON counts for neither. Equalities of other columns (TPC-C's
//     ol_i_id = s_i_id) carry nothing. A table named twice is two uses,
//     each needing keys of its own.
//   - Ranges: key > / >= / < / <= v and key BETWEEN v AND w, for a table
//     with no equality, give Range (the first such table by name), which
//     also covers tables joined to it on the key.
//   - INSERT: the key column's value in each VALUES row, found by its
//     position in the column list; or the key column's item of
//     INSERT … SELECT when it is a constant or parameter. Without a column
//     list, or with a row whose key is an expression or DEFAULT, the
//     target is Missing (keys of the other rows are still listed).
//   - Subqueries (in WHERE, the select list, FROM, WITH) are query levels
//     of their own: their tables need their own keys, and a condition on
//     an outer table inside a subquery says nothing of the outer rows.
//   - UpdatesKey: an UPDATE or ON CONFLICT DO UPDATE assigning the key.
//   - ReadOnly, Aggregate, OrderKey/OrderDesc, Limit and NParams as their
//     field docs say; Aggregate is set for aggregation anywhere in the
//     statement, subqueries included.
//   - Hint: a leading comment /* sluice.key=v */ or -- sluice.key=v of
//     each statement (only before its first token).
//   - Classes: BEGIN/START TRANSACTION, COMMIT/END, ROLLBACK/ABORT,
//     SAVEPOINT/RELEASE/ROLLBACK TO, PREPARE TRANSACTION/COMMIT PREPARED/
//     ROLLBACK PREPARED; SET/RESET sluice.key (SetKey); SET, RESET, RESET
//     ALL and SET SESSION CHARACTERISTICS of other settings (Session).
//
// Not recognised (the statement is Missing, or the class is Other):
//
//   - key = ANY(SELECT …), key = ANY(a column or expression), key <> ANY,
//     key = ALL, key = (SELECT …), key IN (SELECT …), row comparisons
//     ((key, x) = (1, 2)), expressions of the key (key + 0 = 5), JOIN USING
//     columns referred to bare in WHERE, keys through a subquery in FROM
//     (the subquery's own WHERE must name them).
//   - MERGE: its tables are listed (Kind OtherKind) but its keys are not
//     looked for.
//   - Key changes other than by UPDATE's SET (a trigger, MERGE).
//   - User-defined aggregates called without DISTINCT, ORDER BY, FILTER
//     or OVER; functions that write (SELECT my_func() is ReadOnly).
//   - SET LOCAL and SET TRANSACTION of ordinary settings, SHOW, DISCARD,
//     SQL-level PREPARE/EXECUTE/DEALLOCATE, cursors, COPY, EXPLAIN, DDL,
//     LISTEN/NOTIFY, CALL, DO: all Other, with no tables analysed.
//   - set_config('sluice.key', …): a plain SELECT.
//   - A sluice.key comment after the first token of a statement.
package analyze
