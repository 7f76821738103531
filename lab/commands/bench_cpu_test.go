package commands

import "testing"

func TestProcStatTicks(t *testing.T) {
	// Fields 14-17 (utime stime cutime cstime) are 7 11 100 200.
	const rest = " S 4242 1 1 0 -1 4194560 98 0 0 0 7 11 100 200 20 0 1 0 984963 3133440 411"
	for _, tc := range []struct {
		name, stat string
		kids       bool
		ppid       int
		ticks      int64
		bad        bool
	}{
		{"own", "17 (postgres)" + rest, false, 4242, 18, false},
		{"with children", "17 (postgres)" + rest, true, 4242, 318, false},
		{"name with spaces and parens", "17 (postgres: walsender (x) ) )" + rest, true, 4242, 318, false},
		{"no name", "17 postgres" + rest, false, 0, 0, true},
		{"short", "17 (postgres) S 4242 1", false, 0, 0, true},
		{"not a number", "17 (postgres) S 4242 1 1 0 -1 4194560 98 0 0 0 x 11 100 200 20", false, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ppid, ticks, err := procStatTicks(tc.stat, tc.kids)
			if tc.bad {
				if err == nil {
					t.Fatalf("procStatTicks(%q) = %d, %d; want an error", tc.stat, ppid, ticks)
				}
				return
			}
			if err != nil || ppid != tc.ppid || ticks != tc.ticks {
				t.Fatalf("procStatTicks = %d, %d, %v; want %d, %d", ppid, ticks, err, tc.ppid, tc.ticks)
			}
		})
	}
}
