package analyze

import "github.com/sluicedb/sluice/keyspace"

// Class is what a statement is to the router's transaction handling.
type Class int

const (
	// Plain is DML or a query: routed by its keys.
	Plain Class = iota
	// Begin is BEGIN or START TRANSACTION (with any options).
	Begin
	// Commit is COMMIT or END (not COMMIT PREPARED).
	Commit
	// Rollback is ROLLBACK or ABORT (not ROLLBACK TO SAVEPOINT, not ROLLBACK PREPARED).
	Rollback
	// Savepoint is SAVEPOINT, RELEASE [SAVEPOINT] or ROLLBACK TO [SAVEPOINT].
	Savepoint
	// SetKey is SET [LOCAL|SESSION] sluice.key = v / TO v: the routing hint.
	SetKey
	// Session is SET, RESET, SET TRANSACTION excluded: session state every
	// partition's server session must share.
	Session
	// TwoPhase is PREPARE TRANSACTION, COMMIT PREPARED or ROLLBACK PREPARED
	// sent by a client: the router refuses them (it coordinates 2PC itself).
	TwoPhase
	// Other is any other utility statement (DDL, LISTEN, COPY, …).
	Other
	// CursorUse is FETCH, MOVE or CLOSE of a cursor (Cursor names it): it
	// runs where the cursor was declared. (DECLARE itself is Plain, routed
	// by its query.)
	CursorUse
)

// Kind is a Plain statement's command.
type Kind int

const (
	Select Kind = iota
	Insert
	Update
	Delete
	OtherKind
)

// Value is a key as written in a statement: a constant, or a parameter
// whose value comes with Bind.
type Value struct {
	// Param is the 1-based parameter number ($n); 0 for a constant.
	Param int
	// Const is the constant's text as PostgreSQL would read it (string
	// constants unquoted, numbers as written); valid when Param == 0.
	Const string
	// IsString is set for a string-literal constant ('42'), as against a
	// numeric one (42).
	IsString bool
	// Array: the value is an array of keys (key = ANY($1), key =
	// ANY('{1,2}')): a parameter holding an array, or a constant in
	// PostgreSQL's array text form. The statement's rows lie on the owners
	// of its elements; KeysOf reads them (KeyOf refuses an Array value).
	Array bool
}

// KeyRef is one key value a statement names for one table: an equality
// (key = v, v = key), an IN list member, an element or array of
// key = ANY(…), or an INSERT row's key column.
type KeyRef struct {
	Table string // a sharded or co-partitioned table of the keyspace
	Value Value
}

// RangeRef is a range predicate on a table's key (key > / >= / < / <= v,
// BETWEEN): the statement reads the owners of [Lo, Hi). A nil bound is
// unbounded. LoIncl/HiIncl say whether the bound itself is in the range.
type RangeRef struct {
	Table          string
	Lo, Hi         *Value
	LoIncl, HiIncl bool
}

// Statement is the analysis of one SQL statement against a keyspace's
// tables: what the router needs to route it. It is immutable and may be
// shared across sessions (the cache hands out the same pointer).
type Statement struct {
	Class Class
	Kind  Kind // Plain statements

	// Text is the statement's own text (one statement of a multi-statement
	// query string, without the trailing semicolon): its leading comments
	// included, surrounding white space trimmed.
	Text string

	// Sharded lists the sharded and co-partitioned tables the statement
	// touches; Reference the reference tables. Each once, sorted.
	Sharded   []string
	Reference []string

	// Keys are the keys the statement names for its sharded tables. The
	// statement runs on the owners of all of them (of every element, for
	// an Array value; on none, for only empty arrays: no row matches).
	Keys []KeyRef
	// Range is set when a sharded table's rows are chosen by a range of
	// its key (and no equality names its keys): a read over the owners.
	Range *RangeRef
	// Missing names a sharded table that neither Keys nor Range covers,
	// with its key column ("warehouse.w_id"): the router needs a hint or
	// refuses with 0A000. Empty when every sharded table has keys.
	Missing string

	// ReadOnly: a SELECT with no locking clause and no data-modifying CTE.
	ReadOnly bool
	// Aggregate: the statement aggregates, groups, uses DISTINCT or window
	// functions, so results from several partitions cannot be concatenated.
	Aggregate bool
	// OrderKey is the output column the statement orders by first, when
	// that is a sharded table's key column ("" otherwise); OrderDesc its
	// direction. Limit is the LIMIT's constant (0 when none or not a constant).
	OrderKey  string
	OrderDesc bool
	Limit     int64

	// UpdatesKey: an UPDATE (or INSERT … ON CONFLICT DO UPDATE) assigns
	// its target's key column, which may move the row to another
	// partition's range: the router should refuse it.
	UpdatesKey bool

	// Hint is the key of a leading comment /* sluice.key=v */ (or
	// -- sluice.key=v), text as written (a value in single quotes is
	// unquoted); "" when none.
	Hint string
	// SetValue is the value of a SetKey statement (text, unquoted); ""
	// for RESET sluice.key or SET sluice.key TO DEFAULT.
	SetValue string
	// SetLocal: a SetKey statement is SET LOCAL, whose value lasts until
	// the transaction ends.
	SetLocal bool
	// Cursor is the cursor a DECLARE defines (the statement is then its
	// query's analysis: Plain, Kind Select) or a CursorUse statement names
	// ("" for CLOSE ALL). CursorHold: the DECLARE says WITH HOLD, so the
	// cursor outlives its transaction. CursorClose: the CursorUse
	// statement is CLOSE (not FETCH or MOVE).
	Cursor      string
	CursorHold  bool
	CursorClose bool
	// NParams is the highest $n the statement uses.
	NParams int
}

// Schema tells the analyzer which tables are sharded, co-partitioned or
// reference, and their key columns; *keyspace.Keyspace implements it.
// Tables it does not know are plain PostgreSQL tables (catalogs, views):
// they do not affect routing.
type Schema interface {
	Table(name string) (*keyspace.Table, bool)
}

var _ Schema = (*keyspace.Keyspace)(nil)
