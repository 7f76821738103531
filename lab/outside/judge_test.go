package outside

import (
	"strings"
	"testing"
	"time"
)

func TestParseLog(t *testing.T) {
	log := "0 1 4512 0 1764288000 100000\n" +
		"1 1 12000 0 1764288000 900000 300\n" +
		"0 2 failed 0 1764288001 0\n" +
		"\n"
	txs, cut, err := ParseLog(strings.NewReader(log))
	if err != nil || cut {
		t.Fatal(cut, err)
	}
	if len(txs) != 2 || txs[0].Latency != 4512*time.Microsecond || !txs[1].End.Equal(time.Unix(1764288000, 900000000)) {
		t.Fatalf("parsed %+v", txs)
	}
	const good = "0 1 4512 0 1764288000 100000\n"
	for _, bad := range []string{"0 1 4512\n", "0 1 x 0 1764288000 1\n"} {
		if _, _, err := ParseLog(strings.NewReader(bad + good)); err == nil || !strings.Contains(err.Error(), "line 1: ") {
			t.Errorf("%q before a good line: %v, want an error naming line 1", bad, err)
		}
		// The last line cut short (pgbench stopped mid-write) is left out.
		txs, cut, err := ParseLog(strings.NewReader(good + bad + "\n"))
		if err != nil || !cut || len(txs) != 1 {
			t.Errorf("%q last: %d transactions, cut %v, %v; want it left out as cut", bad, len(txs), cut, err)
		}
	}
}

func TestBetween(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var txs []Tx
	for i := range 10 {
		txs = append(txs, Tx{End: t0.Add(time.Duration(i) * time.Second), Latency: time.Duration(i+1) * time.Millisecond})
	}
	w := Between(txs, t0.Add(2*time.Second), t0.Add(6*time.Second)) // ends at 2..5 s: 3, 4, 5, 6 ms
	if w.Count != 4 || w.MeanMs != 4.5 || w.P50Ms != 4 || w.MaxMs != 6 || w.P99Ms != 6 {
		t.Fatalf("window %+v", w)
	}
	if w := Between(txs, t0.Add(time.Hour), t0.Add(2*time.Hour)); w.Count != 0 || w.MeanMs != 0 {
		t.Fatalf("empty window %+v", w)
	}
}

// TestJudge: the rule, both branches, both outcomes each.
func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		sp, pidMs, pidS, fMs, fS float64
		binds, pass              bool
	}{
		{"binds, within", 20, 21.5, 90, 35, 30, true, true},
		{"binds, under", 20, 12, 90, 35, 30, true, false},
		{"binds, over", 20, 23, 40, 35, 30, true, false},
		{"no slack to hold, as fast", 20, 12, 33, 17, 30, false, true},
		{"no slack to hold, too slow", 20, 12, 90, 17, 30, false, false},
		{"no slack to hold, but within", 20, 19, 90, 17, 30, false, true},
	} {
		v := Judge(tc.sp, tc.pidMs, tc.pidS, tc.fMs, tc.fS)
		if v.Binds != tc.binds || v.Pass != tc.pass || v.Why == "" {
			t.Errorf("%s: %+v, want binds %v pass %v", tc.name, v, tc.binds, tc.pass)
		}
	}
}
