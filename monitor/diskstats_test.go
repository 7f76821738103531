package monitor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const sample1 = `   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
 254       0 vda 1000 10 80000 500 2000 20 40000 900 0 1500 1400 0 0 0 0 0 0
 254       1 vda1 900 10 70000 400 1900 20 39000 800 0 1400 1300 0 0 0 0 0 0
`
const sample2 = `   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
 254       0 vda 1300 10 90000 500 2200 20 50000 900 0 1750 1400 0 0 0 0 0 0
`

func TestParseAndRates(t *testing.T) {
	a, err := ParseDiskstats(strings.NewReader(sample1), "vda")
	if err != nil {
		t.Fatal(err)
	}
	if a.ReadsCompleted != 1000 || a.SectorsRead != 80000 || a.WritesCompleted != 2000 || a.SectorsWritten != 40000 || a.IOTicksMs != 1500 {
		t.Fatalf("parsed %+v", a)
	}
	b, _ := ParseDiskstats(strings.NewReader(sample2), "vda")
	h := HostRates(a, b, 500*time.Millisecond)
	if h.Err != nil {
		t.Fatal(h.Err)
	}
	// 300 reads + 200 writes in 0.5 s; 250 ms busy in 0.5 s; 20000 sectors.
	if h.IOPS != 1000 || h.IOTicks != 500 || h.Util != 0.5 || h.Throughput != 20000*512*2 {
		t.Fatalf("rates %+v", h)
	}
	if h := HostRates(b, a, time.Second); h.Err == nil {
		t.Fatal("backwards counters accepted")
	}
	if _, err := ParseDiskstats(strings.NewReader(sample1), "sdz"); err == nil {
		t.Fatal("missing device accepted")
	}
	if _, err := ParseDiskstats(strings.NewReader(" 1 2 vda x 0 0 0 0 0 0 0 0 0 0\n"), "vda"); err == nil {
		t.Fatal("garbage field accepted")
	}
}

func TestHostSample(t *testing.T) {
	p := filepath.Join(t.TempDir(), "diskstats")
	os.WriteFile(p, []byte(sample1), 0o644)
	h := &Host{Device: "vda", Path: p}
	t0 := time.Unix(100, 0)
	if got := h.Sample(t0); !errors.Is(got.Err, ErrNoBaseline) {
		t.Fatalf("first sample err = %v, want ErrNoBaseline", got.Err)
	}
	os.WriteFile(p, []byte(sample2), 0o644)
	if got := h.Sample(t0.Add(time.Second)); got.Err != nil || got.IOPS != 500 {
		t.Fatalf("second sample %+v", got)
	}
	os.Remove(p)
	if got := h.Sample(t0.Add(2 * time.Second)); got.Err == nil {
		t.Fatal("unreadable diskstats gave no error")
	}
}
