// Package keyspace is the model of a sharded database: a set of partitions
// (PostgreSQL databases in tenants that agents run) sharing one schema, the
// kind of each table, and the partition plan that maps key ranges of each
// root table to partitions (the Squall paper §2; shared/DESIGN.md §5).
//
// A table is one of:
//
//   - sharded: its rows are placed by its key column's value (an integer or
//     a text key) through the plan's ranges for that table, its root;
//   - co-partitioned: its rows follow a root table's key (TPC-C's district,
//     customer, orders, order_line and stock follow warehouse's w_id): its
//     key column holds the root's key and the root's ranges place it;
//   - reference: copied whole to every partition (TPC-C's item).
//
// Keys compare as PostgreSQL compares them under the "C" collation: integers
// numerically, text bytewise. Ranges are half-open, [lo,hi), with an empty
// bound meaning unbounded.
//
// Everything here is pure: values in, values or errors out. A Keyspace is
// validated once, by New (or Validate after decoding); the router and the
// agents then trust it. A Keyspace is immutable after validation and safe
// for concurrent use.
package keyspace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
)

// Kind is how a table's rows are placed.
type Kind string

const (
	Sharded       Kind = "sharded"
	CoPartitioned Kind = "copartitioned"
	Reference     Kind = "reference"
)

// KeyType is the type of a root table's key.
type KeyType string

const (
	Int  KeyType = "int"  // smallint, integer or bigint column; int64 values
	Text KeyType = "text" // text or varchar column; compared bytewise
)

// Table is one table of a keyspace.
type Table struct {
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
	// Column is the key column (sharded and co-partitioned tables).
	Column string `json:"column,omitempty"`
	// Type is the key's type (sharded tables; co-partitioned ones take their root's).
	Type KeyType `json:"type,omitempty"`
	// Root is the table whose plan places this one's rows (co-partitioned tables).
	Root string `json:"root,omitempty"`
	// Secondary is an integer column of a co-partitioned table that splits
	// one root key's rows when they are too many to move at once (TPC-C's
	// district within warehouse; the Squall paper §4.4). Optional.
	Secondary string `json:"secondary,omitempty"`
}

// Partition is one member of a keyspace: a database in a tenant.
type Partition struct {
	Name string `json:"name"`
	// Tenant is the tenant's name as agents and the proxy know it (tenant-3).
	Tenant string `json:"tenant"`
	// Agent is the name (a peer of the keyspace's agent) or URL of the agent
	// that runs the tenant; empty for the keyspace's own agent.
	Agent string `json:"agent,omitempty"`
	// Database is the database inside the tenant; "" means "postgres".
	Database string `json:"database,omitempty"`
}

// DB returns the partition's database name.
func (p Partition) DB() string {
	if p.Database == "" {
		return "postgres"
	}
	return p.Database
}

// Keyspace is a validated keyspace. Its fields are read-only after New.
type Keyspace struct {
	Name       string      `json:"name"`
	Partitions []Partition `json:"partitions"`
	Tables     []Table     `json:"tables"`
	// Schema is the SQL applied to every partition at creation.
	Schema string `json:"schema,omitempty"`
	// Plan is the partition plan in Squall's form, as given.
	Plan PlanSpec `json:"plan"`
	// Epoch counts plan changes; 1 for the plan the keyspace was created with.
	Epoch uint64 `json:"epoch"`
	// NoTwoPC refuses transactions that span partitions (SQLSTATE 0A000)
	// instead of committing them with two-phase commit.
	NoTwoPC bool `json:"no_2pc,omitempty"`

	tables map[string]*Table
	parts  map[string]int
	plan   Plan
}

// ErrInvalid wraps every validation error; errors.Is(err, ErrInvalid)
// tells bad input from other failures.
var ErrInvalid = errors.New("keyspace: invalid")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

var identRe = regexp.MustCompile(`^[a-z_][a-z0-9_$]*$`)

// Validate checks ks and builds its lookup structures. It must be called
// (New does) before any other method; the error is one line naming what
// is wrong.
func (ks *Keyspace) Validate() error {
	if !identRe.MatchString(ks.Name) || len(ks.Name) > 63 {
		return invalidf("name %q: want a lower-case identifier of at most 63 bytes", ks.Name)
	}
	if len(ks.Partitions) == 0 {
		return invalidf("keyspace %s has no partitions", ks.Name)
	}
	ks.parts = map[string]int{}
	seenDB := map[string]string{}
	for i, p := range ks.Partitions {
		if !identRe.MatchString(p.Name) {
			return invalidf("partition name %q: want a lower-case identifier", p.Name)
		}
		if _, dup := ks.parts[p.Name]; dup {
			return invalidf("partition %s named twice", p.Name)
		}
		if p.Tenant == "" {
			return invalidf("partition %s: no tenant", p.Name)
		}
		where := p.Agent + "\x00" + p.Tenant + "\x00" + p.DB()
		if other, dup := seenDB[where]; dup {
			return invalidf("partitions %s and %s are the same database %s of tenant %s", other, p.Name, p.DB(), p.Tenant)
		}
		seenDB[where] = p.Name
		ks.parts[p.Name] = i
	}
	if err := ks.validateTables(); err != nil {
		return err
	}
	plan, err := ParsePlan(ks.Plan, ks)
	if err != nil {
		return err
	}
	ks.plan = plan
	if ks.Epoch == 0 {
		ks.Epoch = 1
	}
	return nil
}

func (ks *Keyspace) validateTables() error {
	if len(ks.Tables) == 0 {
		return invalidf("keyspace %s has no tables", ks.Name)
	}
	ks.tables = map[string]*Table{}
	for i := range ks.Tables {
		t := &ks.Tables[i]
		if !identRe.MatchString(t.Name) {
			return invalidf("table name %q: want a lower-case identifier", t.Name)
		}
		if _, dup := ks.tables[t.Name]; dup {
			return invalidf("table %s named twice", t.Name)
		}
		ks.tables[t.Name] = t
		switch t.Kind {
		case Sharded:
			if t.Type != Int && t.Type != Text {
				return invalidf("table %s: key type %q: want int or text", t.Name, t.Type)
			}
			if t.Root != "" && t.Root != t.Name {
				return invalidf("table %s: a sharded table is its own root; co-partition it to follow %s", t.Name, t.Root)
			}
			t.Root = t.Name
		case CoPartitioned:
			if t.Root == "" {
				return invalidf("table %s: co-partitioned without a root table", t.Name)
			}
		case Reference:
			if t.Column != "" || t.Root != "" || t.Secondary != "" {
				return invalidf("table %s: a reference table has no key column, root or secondary column", t.Name)
			}
			continue
		default:
			return invalidf("table %s: kind %q: want sharded, copartitioned or reference", t.Name, t.Kind)
		}
		if !identRe.MatchString(t.Column) {
			return invalidf("table %s: key column %q: want a lower-case identifier", t.Name, t.Column)
		}
		if t.Secondary != "" && (t.Kind != CoPartitioned || !identRe.MatchString(t.Secondary) || t.Secondary == t.Column) {
			return invalidf("table %s: secondary column %q: want a lower-case identifier other than the key, on a co-partitioned table", t.Name, t.Secondary)
		}
	}
	for i := range ks.Tables {
		t := &ks.Tables[i]
		if t.Kind != CoPartitioned {
			continue
		}
		root, ok := ks.tables[t.Root]
		if !ok {
			return invalidf("table %s: root table %s is not in keyspace %s", t.Name, t.Root, ks.Name)
		}
		if root.Kind != Sharded {
			return invalidf("table %s: root table %s is %s, not sharded", t.Name, t.Root, root.Kind)
		}
		if t.Type != "" && t.Type != root.Type {
			return invalidf("table %s: key type %s differs from its root %s's %s", t.Name, t.Type, root.Name, root.Type)
		}
		t.Type = root.Type
	}
	return nil
}

// Table returns the named table.
func (ks *Keyspace) Table(name string) (*Table, bool) {
	t, ok := ks.tables[name]
	return t, ok
}

// Partition returns the named partition.
func (ks *Keyspace) Partition(name string) (Partition, bool) {
	i, ok := ks.parts[name]
	if !ok {
		return Partition{}, false
	}
	return ks.Partitions[i], true
}

// PlanRanges returns the validated plan.
func (ks *Keyspace) PlanRanges() Plan { return ks.plan }

// Roots returns the names of the sharded tables, sorted.
func (ks *Keyspace) Roots() []string {
	var out []string
	for _, t := range ks.Tables {
		if t.Kind == Sharded {
			out = append(out, t.Name)
		}
	}
	sort.Strings(out)
	return out
}

// Owner returns the partition that owns key k of table (sharded or
// co-partitioned). The key must have the table's type.
func (ks *Keyspace) Owner(table string, k Key) (string, error) {
	t, ok := ks.tables[table]
	if !ok {
		return "", fmt.Errorf("keyspace %s: no table %s", ks.Name, table)
	}
	if t.Kind == Reference {
		return "", fmt.Errorf("keyspace %s: table %s is a reference table: every partition has it", ks.Name, table)
	}
	if k.Type != t.Type {
		return "", fmt.Errorf("%w: table %s: key %s is %s, want %s", ErrKeyType, table, k, k.Type, t.Type)
	}
	return ks.plan[t.Root].Owner(k)
}

// Owners returns the partitions owning some key of [lo, hi) of table, in
// key order, each once. A zero Bound is unbounded.
func (ks *Keyspace) Owners(table string, lo, hi Bound) ([]string, error) {
	t, ok := ks.tables[table]
	if !ok || t.Kind == Reference {
		return nil, fmt.Errorf("keyspace %s: %s is not a sharded or co-partitioned table", ks.Name, table)
	}
	return ks.plan[t.Root].Overlapping(lo, hi), nil
}

// WithPlan returns a copy of ks with plan p and the next epoch, validated.
func (ks *Keyspace) WithPlan(p PlanSpec) (*Keyspace, error) {
	next := *ks
	next.Plan = p
	next.Epoch = ks.Epoch + 1
	next.Tables = append([]Table(nil), ks.Tables...)
	next.Partitions = append([]Partition(nil), ks.Partitions...)
	if err := next.Validate(); err != nil {
		return nil, err
	}
	return &next, nil
}

// Decode reads a keyspace from JSON (unknown fields refused) and validates it.
func Decode(data []byte) (*Keyspace, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var ks Keyspace
	if err := dec.Decode(&ks); err != nil {
		return nil, invalidf("%v", err)
	}
	if err := ks.Validate(); err != nil {
		return nil, err
	}
	return &ks, nil
}
