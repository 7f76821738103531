package throttle

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBucket runs the bucket arithmetic on a fixed time grid. Each script line
// is "<time since start> <op> [args] [-> want]":
//
//	reserve N -> D   reserve N bytes (ticket #k, k counting from 0); D = delay
//	delay #k -> D    delay of ticket #k now; D is a duration, 0 or "paused"
//	set R            set the rate (a number, "inf", "nan")
//	cancel #k        give ticket #k back
//	tokens -> X      bucket level in bytes (rounded)
//	burst -> N       current burst in bytes
//	rate -> R        current rate
func TestBucket(t *testing.T) {
	tests := []struct {
		name   string
		rate   float64
		burst  int
		script []string
	}{
		{"empty start waits for the first chunk", 1000, 1000, []string{
			"0s reserve 100 -> 100ms",
			"100ms delay #0 -> 0",
		}},
		{"idle credit is capped at burst", 1000, 500, []string{
			"10s tokens -> 500",
			"10s reserve 500 -> 0",
			"10s reserve 1 -> 1ms",
		}},
		{"waiters queue in reservation order", 1000, 1000, []string{
			"0s reserve 100 -> 100ms",
			"0s reserve 100 -> 200ms",
			"50ms delay #0 -> 50ms",
			"50ms delay #1 -> 150ms",
			"150ms delay #0 -> 0",
			"150ms delay #1 -> 50ms",
		}},
		{"lowered rate re-plans the rest of a wait", 1000, 1000, []string{
			"0s reserve 1000 -> 1s",
			"500ms set 100",
			"500ms delay #0 -> 5s",
			"5500ms delay #0 -> 0",
		}},
		{"raised rate re-plans the rest of a wait", 100, 1000, []string{
			"0s reserve 1000 -> 10s",
			"1s set 900",
			"1s delay #0 -> 1s",
			"2s delay #0 -> 0",
		}},
		{"pause freezes credit until raised", 1000, 1000, []string{
			"0s reserve 1000 -> 1s",
			"400ms set 0",
			"400ms delay #0 -> paused",
			"1h delay #0 -> paused",
			"1h set 1000",
			"1h delay #0 -> 600ms",
		}},
		{"unlimited forgives debt, leaving it starts empty", 1000, 1000, []string{
			"0s reserve 1000 -> 1s",
			"0s reserve 1000 -> 2s",
			"100ms set inf",
			"100ms delay #0 -> 0",
			"100ms delay #1 -> 0",
			"10s set 1000",
			"10s tokens -> 0",
			"10s reserve 100 -> 100ms",
		}},
		{"cancelling the newest ticket gives its bytes back", 1000, 1000, []string{
			"0s reserve 500 -> 500ms",
			"0s reserve 500 -> 1s",
			"0s cancel #1",
			"0s reserve 100 -> 600ms",
		}},
		{"cancelling an older ticket forfeits its bytes", 1000, 1000, []string{
			"0s reserve 500 -> 500ms",
			"0s reserve 500 -> 1s",
			"0s cancel #0",
			"0s delay #1 -> 1s",
			"1s delay #1 -> 0",
		}},
		{"auto burst follows the rate", 1e6, 0, []string{
			"0s burst -> 524288",
			"0s set 1e9",
			"0s burst -> 20000000",
			"0s set 0",
			"0s burst -> 524288",
			"0s set inf",
			"0s burst -> 268435456",
			"0s set 1e12",
			"0s burst -> 268435456",
		}},
		{"lowering an auto burst trims saved credit", 1e9, 0, []string{
			"1s tokens -> 20000000",
			"1s set 1e6",
			"1s tokens -> 524288",
		}},
		{"negative and NaN rates pause", 1000, 1000, []string{
			"0s set -5",
			"0s rate -> 0",
			"0s reserve 1 -> paused",
			"0s set nan",
			"0s rate -> 0",
		}},
		{"a tiny rate caps the planned delay", 1e-12, 1000, []string{
			"0s reserve 1000 -> 1281023h53m38.427387904s",
		}},
		{"a clock going back is ignored", 1000, 10000, []string{
			"1s tokens -> 1000",
			"500ms tokens -> 1000",
			"2s tokens -> 2000",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
			b := newBucket(t0, tt.rate, tt.burst)
			var tickets []int64
			var sizes []int
			ticket := func(arg string) int {
				k, err := strconv.Atoi(strings.TrimPrefix(arg, "#"))
				if err != nil || k >= len(tickets) {
					t.Fatalf("bad ticket %q", arg)
				}
				return k
			}
			for _, line := range tt.script {
				lhs, want, _ := strings.Cut(line, " -> ")
				f := strings.Fields(lhs)
				at, err := time.ParseDuration(f[0])
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				now := t0.Add(at)
				b.advance(now)
				var got string
				switch f[1] {
				case "reserve":
					n, _ := strconv.Atoi(f[2])
					tickets = append(tickets, b.reserve(n))
					sizes = append(sizes, n)
					got = fmtDelay(b.delay(tickets[len(tickets)-1]))
				case "delay":
					got = fmtDelay(b.delay(tickets[ticket(f[2])]))
				case "set":
					r, err := strconv.ParseFloat(f[2], 64)
					if err != nil {
						t.Fatalf("%s: %v", line, err)
					}
					b.setRate(now, r)
				case "cancel":
					k := ticket(f[2])
					b.cancel(tickets[k], sizes[k])
				case "tokens":
					got = fmt.Sprintf("%.0f", b.tokens)
				case "burst":
					got = strconv.Itoa(b.burst)
				case "rate":
					got = strconv.FormatFloat(b.rate, 'g', -1, 64)
				default:
					t.Fatalf("unknown op in %q", line)
				}
				if want != "" && got != want {
					t.Fatalf("%s: got %s", line, got)
				}
			}
		})
	}
}

func fmtDelay(d time.Duration, paused bool) string {
	if paused {
		return "paused"
	}
	if d == 0 {
		return "0"
	}
	return d.String()
}

func TestAutoBurstRule(t *testing.T) {
	tests := []struct {
		name string
		rate float64
		want int
	}{
		{"paused", 0, 512 << 10},
		{"1 MB/s gets the floor", 1e6, 512 << 10},
		{"floor boundary 26.2144 MB/s", 26214400, 512 << 10},
		{"just above the floor is rate/50", 3e7, 6e5},
		{"100 MB/s is rate/50", 1e8, 2e6},
		{"2 GB/s is rate/50", 2e9, 4e7},
		{"ceiling", 1e12, 256 << 20},
		{"unlimited", math.Inf(1), 256 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := autoBurst(tt.rate); got != tt.want {
				t.Fatalf("autoBurst(%g) = %d, want %d", tt.rate, got, tt.want)
			}
		})
	}
}
