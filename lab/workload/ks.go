package workload

// Keyspace workloads: YCSB (ksycsb*.go) and TPC-C-lite (tpcc*.go) over a
// keyspace's partitions. What they share lives here: how a run reaches the
// partitions (Reach), the pools, routing a transaction in direct mode, and
// the verdict of the row-by-row check.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicedb/sluice/keyspace"
)

// Reach says how a keyspace workload reaches the keyspace.
//
// Loading and verification always go straight to each partition's database
// (Partitions). Transactions go to Router when it is set (router mode: one
// DSN, the sluice proxy with the keyspace's name as database; transactions
// spanning partitions are sent as they are, for the router's two-phase
// commit). Without Router the workload routes itself (direct mode): each
// transaction goes to its owner's DSN in Client (default Partitions), and
// one that would span partitions is skipped and counted. Client pointing at
// the proxy with each partition's tenant alias is the per-tenant-proxy
// comparison: the same code as direct.
type Reach struct {
	Partitions map[string]string // partition name → DSN of its database
	Client     map[string]string // partition name → DSN for transactions in direct mode; nil: Partitions
	Router     string            // the keyspace router's DSN; "" for direct mode
	// Final, if set, returns the keyspace as it stands when the run ends,
	// whose plan the verification places rows by: a run during which the
	// plan changed (a live reconfiguration through the router) is checked
	// against the new plan. nil: the run's keyspace. The keyspace returned
	// must have the same partitions and tables.
	Final func(ctx context.Context) (*keyspace.Keyspace, error)
}

// final returns the keyspace to verify against: Final's, or ks.
func (r Reach) final(ctx context.Context, ks *keyspace.Keyspace) (*keyspace.Keyspace, error) {
	if r.Final == nil {
		return ks, nil
	}
	fin, err := r.Final(ctx)
	if err != nil {
		return nil, fmt.Errorf("workload: the keyspace to verify against: %w", err)
	}
	if fin.Name != ks.Name || len(fin.Partitions) != len(ks.Partitions) || len(fin.Tables) != len(ks.Tables) {
		return nil, fmt.Errorf("workload: keyspace %s to verify against is not the run's %s (partitions or tables differ)", fin.Name, ks.Name)
	}
	return fin, nil
}

// Validate checks that every partition of ks has a DSN and no unknown
// partition is named.
func (r Reach) Validate(ks *keyspace.Keyspace) error {
	for _, m := range []struct {
		what string
		dsns map[string]string
	}{{"partition", r.Partitions}, {"client", r.Client}} {
		if m.dsns == nil && m.what == "client" {
			continue
		}
		for _, p := range ks.Partitions {
			if m.dsns[p.Name] == "" {
				return fmt.Errorf("workload: keyspace %s: no %s DSN for partition %s", ks.Name, m.what, p.Name)
			}
		}
		for name := range m.dsns {
			if _, ok := ks.Partition(name); !ok {
				return fmt.Errorf("workload: keyspace %s has no partition %s (%s DSN given)", ks.Name, name, m.what)
			}
		}
	}
	return nil
}

// Mode names how transactions were sent: "router" or "direct".
func (r Reach) Mode() string {
	if r.Router != "" {
		return "router"
	}
	return "direct"
}

// pools is one pgx pool per partition, by partition name.
type pools map[string]*pgxpool.Pool

// openPools opens a pool of up to size connections to each DSN and opens
// them all before returning, so a run's first transactions do not pay for
// connecting.
func openPools(ctx context.Context, dsns map[string]string, size int) (pools, error) {
	ps := pools{}
	for name, dsn := range dsns {
		p, err := openPool(ctx, dsn, size)
		if err != nil {
			ps.close()
			return nil, fmt.Errorf("workload: partition %s: %w", name, err)
		}
		ps[name] = p
	}
	return ps, nil
}

func openPool(ctx context.Context, dsn string, size int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(size)
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	conns := make([]*pgxpool.Conn, 0, size)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for i := 0; i < size; i++ {
		c, err := p.Acquire(ctx)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("connect: %w", err)
		}
		conns = append(conns, c)
	}
	return p, nil
}

func (ps pools) close() {
	for _, p := range ps {
		p.Close()
	}
}

// each runs fn for every partition at once and returns the first error.
func (ps pools) each(fn func(name string, p *pgxpool.Pool) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(ps))
	for name, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(name, p); err != nil {
				errs <- fmt.Errorf("partition %s: %w", name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// sender sends a run's transactions: to the router, or to the owner's pool.
type sender struct {
	router *pgxpool.Pool
	direct pools
	// spanning counts transactions touching more than one partition that
	// were sent (router mode) or skipped (direct mode).
	spanning atomic.Int64
}

func newSender(ctx context.Context, r Reach, size int) (*sender, error) {
	if r.Router != "" {
		p, err := openPool(ctx, r.Router, size)
		if err != nil {
			return nil, fmt.Errorf("workload: router: %w", err)
		}
		return &sender{router: p}, nil
	}
	dsns := r.Client
	if dsns == nil {
		dsns = r.Partitions
	}
	ps, err := openPools(ctx, dsns, size)
	if err != nil {
		return nil, err
	}
	return &sender{direct: ps}, nil
}

func (s *sender) close() {
	if s.router != nil {
		s.router.Close()
	}
	s.direct.close()
}

// pick returns where worker w's transaction touching partitions parts
// goes, or errSkipped in direct mode when they are more than one.
func (s *sender) pick(w *workerState, parts []string) (*pgxpool.Pool, error) {
	span := len(parts) > 1
	w.spans = span
	if span {
		s.spanning.Add(1)
	}
	if s.router != nil {
		return s.router, nil
	}
	if span {
		return nil, errSkipped
	}
	return s.direct[parts[0]], nil
}

// ErrCommitUnknown wraps an error from COMMIT: the transaction may or may
// not have committed, so its writes are neither acknowledged nor lost.
var ErrCommitUnknown = errors.New("workload: commit outcome unknown")

// inTx runs fn in a transaction on p and commits. An error from COMMIT is
// wrapped in ErrCommitUnknown; any other error rolls back.
func inTx(ctx context.Context, p *pgxpool.Pool, fn func(pgx.Tx) error) error {
	tx, err := p.Begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback(context.Background())
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrCommitUnknown, err)
	}
	return nil
}

// owners returns the partitions owning keys of table, sorted, each once.
func owners(ks *keyspace.Keyspace, table string, keys ...int64) ([]string, error) {
	var out []string
	for _, k := range keys {
		p, err := ks.Owner(table, keyspace.IntKey(k))
		if err != nil {
			return nil, err
		}
		if i := sort.SearchStrings(out, p); i == len(out) || out[i] != p {
			out = append(out, "")
			copy(out[i+1:], out[i:])
			out[i] = p
		}
	}
	return out, nil
}

// evenPlan splits keys [lo, hi) of root into one range per partition, in
// the order given, the first unbounded below and the last above.
func evenPlan(root string, parts []keyspace.Partition, lo, hi int64) keyspace.PlanSpec {
	m := map[string]string{}
	n := int64(len(parts))
	for i, p := range parts {
		a, b := "", ""
		if i > 0 {
			a = fmt.Sprint(lo + (hi-lo)*int64(i)/n)
		}
		if int64(i) < n-1 {
			b = fmt.Sprint(lo + (hi-lo)*int64(i+1)/n)
		}
		m[p.Name] = "[" + a + "," + b + ")"
	}
	return keyspace.PlanSpec{root: m}
}

// Verdict is the row-by-row check of a keyspace run's ledger: each
// acknowledged write looked for on every partition.
type Verdict struct {
	Acknowledged int64 `json:"writes_acknowledged"`
	Lost         int64 `json:"lost"`       // acknowledged, found nowhere (or overwritten by nothing later)
	Duplicated   int64 `json:"duplicated"` // found more than once
	Misplaced    int64 `json:"misplaced"`  // found on a partition the plan does not name
	// Unacknowledged counts writes found that were never acknowledged:
	// their commit's outcome was unknown to the client. Allowed.
	Unacknowledged int64 `json:"unacknowledged_present"`
	// Inconsistent counts broken consistency conditions (TPC-C: a
	// warehouse's ytd against its history, a stock row against its order
	// lines, a district's next order id against its orders).
	Inconsistent int64 `json:"inconsistent"`
	// Placement is every table's rows checked against the plan.
	Placement []Placement `json:"placement"`
	// Problems names the first few failures.
	Problems []string `json:"problems,omitempty"`
}

// OK reports whether nothing acknowledged was lost, duplicated or
// misplaced, and every consistency condition and placement holds.
func (v Verdict) OK() bool {
	if v.Lost != 0 || v.Duplicated != 0 || v.Misplaced != 0 || v.Inconsistent != 0 {
		return false
	}
	for _, p := range v.Placement {
		if p.Misplaced != 0 || p.Differs {
			return false
		}
	}
	return true
}

const maxProblems = 20

func (v *Verdict) problem(format string, args ...any) {
	if len(v.Problems) < maxProblems {
		v.Problems = append(v.Problems, fmt.Sprintf(format, args...))
	}
}

// String is the verdict in one line.
func (v Verdict) String() string {
	var misplacedRows int64
	for _, p := range v.Placement {
		misplacedRows += p.Misplaced
	}
	word := "OK"
	if !v.OK() {
		word = "FAILED"
	}
	return fmt.Sprintf("ledger %s: %d acknowledged, %d lost, %d duplicated, %d misplaced, %d unacknowledged present, %d inconsistent; %d rows off their owner",
		word, v.Acknowledged, v.Lost, v.Duplicated, v.Misplaced, v.Unacknowledged, v.Inconsistent, misplacedRows)
}

// sighting is where one row was found: the partitions, once per copy.
type sighting []string

// judge classifies one acknowledged row found at seen that belongs on owner.
// The caller counts it in Acknowledged.
func (v *Verdict) judge(what string, owner string, seen sighting) {
	switch {
	case len(seen) == 0:
		v.Lost++
		v.problem("%s lost: acknowledged, on no partition (owner %s)", what, owner)
		return
	case len(seen) > 1:
		v.Duplicated++
		v.problem("%s duplicated: on %s", what, strings.Join(seen, ", "))
	}
	for _, p := range seen {
		if p != owner {
			v.Misplaced++
			v.problem("%s misplaced: on %s, owner %s", what, p, owner)
			return
		}
	}
}

// Placement is one table's rows against the plan: sharded and
// co-partitioned rows on the partition owning their key, reference tables
// identical everywhere.
type Placement struct {
	Table     string `json:"table"`
	Rows      int64  `json:"rows"`      // on all partitions together
	Misplaced int64  `json:"misplaced"` // rows on a partition that does not own their key
	Differs   bool   `json:"differs,omitempty"`
}

// CheckPlacement reads every table of ks on every partition, grouped by its
// key column (integer keys: both workloads use them), and counts the rows
// on a partition that does not own them; a reference table's copies are
// compared by an md5 of their rows' text forms, sorted.
func CheckPlacement(ctx context.Context, ks *keyspace.Keyspace, ps pools) ([]Placement, error) {
	var out []Placement
	for _, t := range ks.Tables {
		pl := Placement{Table: t.Name}
		var mu sync.Mutex
		sums := map[string]bool{}
		err := ps.each(func(part string, p *pgxpool.Pool) error {
			if t.Kind == keyspace.Reference {
				var n int64
				var sum string
				q := fmt.Sprintf("SELECT count(*), coalesce(md5(string_agg(r::text, ',' ORDER BY r::text)), '') FROM %s r", t.Name)
				if err := p.QueryRow(ctx, q).Scan(&n, &sum); err != nil {
					return err
				}
				mu.Lock()
				pl.Rows += n
				sums[sum] = true
				mu.Unlock()
				return nil
			}
			rows, err := p.Query(ctx, fmt.Sprintf("SELECT %s::bigint, count(*) FROM %s GROUP BY 1", t.Column, t.Name))
			if err != nil {
				return err
			}
			var k, n, total, off int64
			_, err = pgx.ForEachRow(rows, []any{&k, &n}, func() error {
				total += n
				if o, err := ks.Owner(t.Name, keyspace.IntKey(k)); err != nil || o != part {
					off += n
				}
				return nil
			})
			mu.Lock()
			pl.Rows += total
			pl.Misplaced += off
			mu.Unlock()
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("workload: placement of %s: %w", t.Name, err)
		}
		pl.Differs = len(sums) > 1
		out = append(out, pl)
	}
	return out, nil
}
