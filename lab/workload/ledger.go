package workload

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Ledger is the set of ledger ids whose transactions were acknowledged
// (COMMIT returned success). Safe for concurrent use.
type Ledger struct {
	mu  sync.Mutex
	ids []int64
}

func (l *Ledger) add(id int64) {
	l.mu.Lock()
	l.ids = append(l.ids, id)
	l.mu.Unlock()
}

// Len returns the number of acknowledged writes.
func (l *Ledger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ids)
}

// IDs returns a sorted copy of the acknowledged ids.
func (l *Ledger) IDs() []int64 {
	l.mu.Lock()
	ids := append([]int64(nil), l.ids...)
	l.mu.Unlock()
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// WriteTo writes the ids, one decimal per line.
func (l *Ledger) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriter(w)
	var n int64
	for _, id := range l.IDs() {
		k, err := bw.WriteString(strconv.FormatInt(id, 10) + "\n")
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
	return n, bw.Flush()
}

// Save writes the ledger to path.
func (l *Ledger) Save(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("workload: save ledger: %w", err)
	}
	if _, err := l.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("workload: save ledger: %w", err)
	}
	return f.Close()
}

// LoadLedger reads a ledger written by Save.
func LoadLedger(path string) (*Ledger, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workload: load ledger: %w", err)
	}
	defer f.Close()
	l := &Ledger{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		id, err := strconv.ParseInt(sc.Text(), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("workload: load ledger: %s line %d: %w", path, line, err)
		}
		l.ids = append(l.ids, id)
	}
	return l, sc.Err()
}

// Check is the result of verifying a ledger against a server.
type Check struct {
	Acknowledged int64 `json:"writes_acknowledged"`
	Missing      int64 `json:"writes_missing"`                // acknowledged, absent on the server
	Duplicated   int64 `json:"writes_duplicated"`             // acknowledged, present more than once
	Unacked      int64 `json:"writes_unacknowledged_present"` // present but never acknowledged (allowed: outcome unknown to the client)
}

// OK reports whether nothing acknowledged was lost or duplicated.
func (c Check) OK() bool { return c.Missing == 0 && c.Duplicated == 0 }

// Verify reads every ledger row on conn and compares it, id by id, with l.
func Verify(ctx context.Context, conn *pgx.Conn, l *Ledger) (Check, error) {
	rows, err := conn.Query(ctx, "SELECT id, count(*) FROM "+LedgerTable+" GROUP BY id")
	if err != nil {
		return Check{}, fmt.Errorf("workload: verify: %w", err)
	}
	present := make(map[int64]int64)
	for rows.Next() {
		var id, n int64
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return Check{}, fmt.Errorf("workload: verify: %w", err)
		}
		present[id] = n
	}
	if err := rows.Err(); err != nil {
		return Check{}, fmt.Errorf("workload: verify: %w", err)
	}
	c := Check{}
	acked := make(map[int64]bool)
	for _, id := range l.IDs() {
		c.Acknowledged++
		acked[id] = true
		switch n := present[id]; {
		case n == 0:
			c.Missing++
		case n > 1:
			c.Duplicated++
		}
	}
	for id := range present {
		if !acked[id] {
			c.Unacked++
		}
	}
	return c, nil
}
