package procstat

import (
	"os"
	"testing"
)

func TestParseVmRSS(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     int64
		err      bool
	}{
		{"kB", "Name:\tsluice\nVmPeak:\t  99 kB\nVmRSS:\t   51200 kB\nThreads: 9\n", 51200 << 10, false},
		{"missing", "Name:\tkworker\nState:\tI (idle)\n", 0, true},
		{"no unit", "VmRSS:\t12\n", 0, true},
		{"bad number", "VmRSS:\tx kB\n", 0, true},
	} {
		got, err := ParseVmRSS([]byte(tc.in))
		if (err != nil) != tc.err || got != tc.want {
			t.Fatalf("%s: got %d, %v; want %d, error %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestReadSelf(t *testing.T) {
	u, err := Read(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if u.RSSBytes <= 0 || u.FDs < 3 {
		t.Fatalf("own usage %+v: want RSS > 0 and at least 3 fds", u)
	}
	if _, err := Read(-1); err == nil {
		t.Fatal("pid -1: no error")
	}
}
