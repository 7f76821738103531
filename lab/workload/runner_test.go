package workload

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/pgcluster"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	os.Exit(code)
}

// TestRunAndVerify loads a small usertable on real PostgreSQL, runs the
// open-loop workload, and checks the ledger row by row — then removes one
// acknowledged row and duplicates another to show the check catches both.
func TestRunAndVerify(t *testing.T) {
	c := pgtest.New(t, pgcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const rows = 2000
	res, err := Load(ctx, conn, rows, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM usertable WHERE length(field3) = 100").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != rows || res.Rows != rows || res.Bytes <= 0 {
		t.Fatalf("loaded %d full rows (result %+v), want %d", n, res, rows)
	}

	r, err := NewRunner(Config{DSN: c.ConnString("postgres"), Rate: 80, MPL: 4, Records: rows, Duration: 2 * time.Second, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	var secs []Second
	sum, err := r.Run(ctx, func(s Second) { secs = append(secs, s) })
	if err != nil {
		t.Fatal(err)
	}
	if sum.Transactions == 0 || sum.Errors != 0 || sum.WritesAcked == 0 {
		t.Fatalf("summary %+v: want transactions and acknowledged writes, no errors", sum)
	}
	if len(secs) < 2 {
		t.Fatalf("got %d per-second reports, want ≥ 2", len(secs))
	}
	total := 0
	for _, s := range secs {
		total += s.Count
	}
	if int64(total) != sum.Transactions {
		t.Fatalf("per-second counts sum to %d, summary says %d", total, sum.Transactions)
	}
	if n := len(r.Latencies(0, len(secs))); n != total {
		t.Fatalf("Latencies over the run: %d, want %d", n, total)
	}
	if n := len(r.Latencies(1, 2)); n != secs[1].Count {
		t.Fatalf("Latencies of second 1: %d, want %d", n, secs[1].Count)
	}
	// The per-transaction record agrees with the per-second figures.
	txs := r.Transactions(time.Second, 2*time.Second)
	if len(txs) != secs[1].Count+secs[1].Errors {
		t.Fatalf("Transactions of second 1: %d, want %d", len(txs), secs[1].Count+secs[1].Errors)
	}
	var sumMs float64
	for _, tx := range txs {
		if !(tx.Arrival <= tx.Begin && tx.Begin <= tx.End) || tx.Worker < 0 || tx.Worker >= 4 || tx.Failed {
			t.Fatalf("transaction %+v: want arrival ≤ begin ≤ end, worker in [0, 4), not failed", tx)
		}
		sumMs += float64(tx.End-tx.Arrival) / float64(time.Millisecond)
	}
	if m := sumMs / float64(len(txs)); math.Abs(m-secs[1].MeanMs) > 1e-6 {
		t.Fatalf("second 1's transactions' mean latency %.6f ms, its report says %.6f", m, secs[1].MeanMs)
	}
	// The clients' window a control loop reads (Window) over the same second
	// holds the same transactions.
	if w := r.Window(r.Started().Add(2*time.Second), time.Second); w.Count != secs[1].Count ||
		math.Abs(float64(w.Mean)/float64(time.Millisecond)-secs[1].MeanMs) > 1e-3 {
		t.Fatalf("window over second 1: %+v, want %d transactions at %.3f ms", w, secs[1].Count, secs[1].MeanMs)
	}
	if n := len(r.Transactions(0, time.Hour)); n != total {
		t.Fatalf("Transactions over the run: %d, want %d", n, total)
	}

	chk, err := Verify(ctx, conn, r.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	if !chk.OK() || chk.Acknowledged != sum.WritesAcked || chk.Unacked != 0 {
		t.Fatalf("verify %+v, want all %d acknowledged present once", chk, sum.WritesAcked)
	}

	// A second run on the same table must not reuse the first run's ids.
	r2, err := NewRunner(Config{DSN: c.ConnString("postgres"), Rate: 80, MPL: 4, Records: rows, Duration: time.Second, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if chk, err := Verify(ctx, conn, r2.Ledger); err != nil || !chk.OK() || chk.Acknowledged == 0 {
		t.Fatalf("second run with the same seed: %+v, %v; want its own ids, each present once", chk, err)
	}

	// Save/load round trip.
	path := filepath.Join(t.TempDir(), "ledger")
	if err := r.Ledger.Save(path); err != nil {
		t.Fatal(err)
	}
	l2, err := LoadLedger(path)
	if err != nil || l2.Len() != r.Ledger.Len() {
		t.Fatalf("ledger round trip: %v, %d ids, want %d", err, l2.Len(), r.Ledger.Len())
	}

	// The check must be able to fail.
	ids := r.Ledger.IDs()
	if _, err := conn.Exec(ctx, "DELETE FROM sluice_ledger WHERE id = $1", ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO sluice_ledger (id) VALUES ($1)", ids[len(ids)-1]); err != nil {
		t.Fatal(err)
	}
	chk, err = Verify(ctx, conn, l2)
	if err != nil {
		t.Fatal(err)
	}
	if chk.Missing != 1 || chk.Duplicated != 1 || chk.OK() {
		t.Fatalf("after deleting one and duplicating one: %+v, want missing 1 duplicated 1", chk)
	}
}

func TestConfigErrors(t *testing.T) {
	good := Config{DSN: "x", Rate: 1, Records: 1, Duration: time.Second}
	for name, mut := range map[string]func(*Config){
		"no dsn":        func(c *Config) { c.DSN = "" },
		"zero rate":     func(c *Config) { c.Rate = 0 },
		"negative rate": func(c *Config) { c.Rate = -5 },
		"mpl":           func(c *Config) { c.MPL = -1 },
		"read fraction": func(c *Config) { c.ReadFraction = 1.5 },
		"records":       func(c *Config) { c.Records = 0 },
		"duration":      func(c *Config) { c.Duration = 0 },
	} {
		c := good
		mut(&c)
		if _, err := NewRunner(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := NewRunner(good); err != nil {
		t.Fatalf("good config rejected: %v", err)
	}
}

// sleepDriver's transactions sleep for d.
type sleepDriver struct{ d time.Duration }

func (sleepDriver) open(context.Context, int) error { return nil }
func (s sleepDriver) txn(context.Context, *workerState) error {
	time.Sleep(s.d)
	return nil
}
func (sleepDriver) close() {}

// TestClosedLoop: a closed-loop run keeps every worker busy for its
// duration, drops nothing, and times each transaction from its begin.
func TestClosedLoop(t *testing.T) {
	lp, err := Arrivals{MPL: 3, Duration: 300 * time.Millisecond, Closed: true}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(lp, sleepDriver{time.Millisecond})
	sum, err := r.Run(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Transactions < 3 || sum.Dropped != 0 || sum.Errors != 0 {
		t.Fatalf("summary %+v: want transactions, none dropped or failed", sum)
	}
	for _, tx := range r.Transactions(0, time.Hour) {
		if tx.Arrival != tx.Begin {
			t.Fatalf("transaction %+v: arrival is not its begin", tx)
		}
	}
}
