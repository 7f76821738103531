package analyze

import (
	"fmt"
	"sync"
	"testing"
)

func TestCacheHit(t *testing.T) {
	c := NewCache(bench(t), 4)
	const q = `SELECT * FROM warehouse WHERE w_id = $1`
	a, err := c.Statements(q)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := c.Statements(q)
	if len(a) != 1 || len(b) != 1 || a[0] != b[0] {
		t.Fatalf("second Statements(%q) = %p, want the cached %p", q, b, a)
	}
	if _, err := c.Statements(`SELEC 1`); err == nil {
		t.Fatal("Statements(SELEC 1): no error")
	}
	if _, err := c.Statements(`SELEC 1`); err == nil || c.Len() != 2 {
		t.Fatalf("cached error: %v, %d texts cached; want an error and 2", err, c.Len())
	}
}

// TestCacheEviction: the cache holds at most size texts, and a text used
// since the clock hand last passed survives the next eviction.
func TestCacheEviction(t *testing.T) {
	c := NewCache(bench(t), 3)
	q := func(i int) string { return fmt.Sprintf("SELECT %d", i) }
	first := map[int]*Statement{}
	for i := range 3 {
		st, _ := c.Statements(q(i))
		first[i] = st[0]
	}
	c.Statements(q(0)) // used: survives the next insertion
	c.Statements(q(3))
	if c.Len() != 3 {
		t.Fatalf("Len = %d, want 3", c.Len())
	}
	if st, _ := c.Statements(q(0)); st[0] != first[0] {
		t.Errorf("%s was evicted though used", q(0))
	}
	for i := range 50 {
		c.Statements(q(100 + i))
		if c.Len() > 3 {
			t.Fatalf("Len = %d after %d insertions, want at most 3", c.Len(), i)
		}
	}
	off := NewCache(bench(t), 0)
	a, _ := off.Statements(q(1))
	b, _ := off.Statements(q(1))
	if a[0] == b[0] || off.Len() != 0 {
		t.Errorf("a size-0 cache cached")
	}
}

// TestCacheConcurrent is for -race: readers and writers on overlapping texts.
func TestCacheConcurrent(t *testing.T) {
	c := NewCache(bench(t), 8)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				q := fmt.Sprintf("SELECT * FROM warehouse WHERE w_id = %d", (g*7+i)%12)
				st, err := c.Statements(q)
				if err != nil || len(st) != 1 || len(st[0].Keys) != 1 {
					t.Errorf("Statements(%q) = %v, %v", q, st, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// benchQuery is TPC-C new-order's customer and warehouse read.
const benchQuery = `SELECT c_discount, c_last, c_credit, w_tax FROM customer, warehouse WHERE w_id = $1 AND c_w_id = w_id AND c_d_id = $2 AND c_id = $3`

// BenchmarkAnalyze is a cache miss: parse and analyse one statement.
func BenchmarkAnalyze(b *testing.B) {
	ks := bench(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(benchQuery, ks); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCacheHit is the cost of a repeated text, from many goroutines.
func BenchmarkCacheHit(b *testing.B) {
	c := NewCache(bench(b), 1024)
	if _, err := c.Statements(benchQuery); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Statements(benchQuery)
		}
	})
}
