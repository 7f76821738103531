// Package outside judges sluice the way a user would: from outside, with
// pgbench's own per-transaction log. It starts two `sluice agent` processes
// and a `sluice proxy`, loads a pgbench tenant through the proxy, measures
// the idle latency, then migrates the tenant twice with `sluice migrate`
// while `pgbench -R … -l` runs through the proxy — once unthrottled, once at
// the default profile's PID with a setpoint of a multiple of the idle
// latency — and reads the clients' latency during each migration from
// pgbench's log, not from anything sluice reports.
//
// The verdict (Judge) is the issue's: the clients' mean within ±10 % of the
// setpoint, or, where even the unthrottled copy stays under the setpoint
// (there is no latency to hold), the controlled migration no slower than
// 1.2 × the unthrottled one.
package outside

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Tx is one transaction of pgbench's log: when it ended and how long the
// client waited for it (with -R, from its scheduled start: the lag in
// pgbench's own schedule counts, as a client's would).
type Tx struct {
	End     time.Time
	Latency time.Duration
}

// ParseLog reads pgbench's per-transaction log (-l): lines of "client_id
// transaction_no time script_no time_epoch time_us [schedule_lag]", time in
// µs. Lines of failed or skipped transactions ("failed", "skipped") are
// left out. A malformed line is an error, except the log's last: a pgbench
// stopped mid-run (the load through the migrations is) leaves a line cut
// short at the end of its log, which ParseLog leaves out and reports as cut.
func ParseLog(r io.Reader) (txs []Tx, cut bool, err error) {
	sc := bufio.NewScanner(r)
	bad := "" // the last malformed line, with its number; fatal once another follows
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if bad != "" {
			return nil, false, fmt.Errorf("outside: pgbench log %s", bad)
		}
		if len(f) >= 6 && (f[2] == "failed" || f[2] == "skipped") {
			continue
		}
		var lat, sec, us int64
		var err1, err2, err3 error
		if len(f) >= 6 {
			lat, err1 = strconv.ParseInt(f[2], 10, 64)
			sec, err2 = strconv.ParseInt(f[4], 10, 64)
			us, err3 = strconv.ParseInt(f[5], 10, 64)
		}
		if len(f) < 6 || err1 != nil || err2 != nil || err3 != nil {
			bad = fmt.Sprintf("line %d: %q", n, sc.Text())
			continue
		}
		txs = append(txs, Tx{End: time.Unix(sec, us*1000), Latency: time.Duration(lat) * time.Microsecond})
	}
	return txs, bad != "", sc.Err()
}

// Window is the clients' view of a span of time: transactions that ended in
// it.
type Window struct {
	Count  int     `json:"transactions"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P95Ms  float64 `json:"p95_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

// Between summarises the transactions of txs that ended in [from, to).
func Between(txs []Tx, from, to time.Time) Window {
	var ms []float64
	for _, t := range txs {
		if !t.End.Before(from) && t.End.Before(to) {
			ms = append(ms, float64(t.Latency)/float64(time.Millisecond))
		}
	}
	w := Window{Count: len(ms)}
	if len(ms) == 0 {
		return w
	}
	sort.Float64s(ms)
	var sum float64
	for _, v := range ms {
		sum += v
	}
	q := func(p float64) float64 { return round(ms[int(math.Ceil(p*float64(len(ms))))-1], 2) }
	w.MeanMs, w.P50Ms, w.P95Ms, w.P99Ms, w.MaxMs = round(sum/float64(len(ms)), 2), q(0.5), q(0.95), q(0.99), round(ms[len(ms)-1], 2)
	return w
}

// Verdict is the judgement of one controlled migration against its
// unthrottled twin.
type Verdict struct {
	// OffSetpointPct is the clients' mean during the controlled migration
	// against the setpoint, %.
	OffSetpointPct float64 `json:"off_setpoint_pct"`
	// TimeRatio is the controlled migration's time over the unthrottled
	// one's.
	TimeRatio float64 `json:"time_ratio"`
	// Binds says whether the setpoint binds: the unthrottled migration's
	// clients' mean exceeded it.
	Binds bool `json:"setpoint_binds"`
	// Pass: within ±10 % of a setpoint that binds, or no slower than 1.2 ×
	// the unthrottled migration where it does not.
	Pass bool `json:"pass"`
	// Why says which rule decided, in words.
	Why string `json:"why"`
}

// Judge applies the rule: setpointMs, the controlled migration's clients'
// mean and seconds, the unthrottled one's.
func Judge(setpointMs, pidMeanMs, pidSecs, freeMeanMs, freeSecs float64) Verdict {
	v := Verdict{
		OffSetpointPct: round(100*(pidMeanMs-setpointMs)/setpointMs, 1),
		TimeRatio:      round(pidSecs/freeSecs, 2),
		Binds:          freeMeanMs > setpointMs,
	}
	within := math.Abs(pidMeanMs-setpointMs) <= 0.1*setpointMs
	switch {
	case within:
		v.Pass, v.Why = true, fmt.Sprintf("the clients' mean %.2f ms is within ±10 %% of the %.2f ms setpoint (%+.1f %%)", pidMeanMs, setpointMs, v.OffSetpointPct)
	case !v.Binds:
		v.Pass = v.TimeRatio <= 1.2
		v.Why = fmt.Sprintf("the setpoint does not bind (unthrottled %.2f ms ≤ %.2f ms); the controlled migration took %.2f× the unthrottled one's time (rule: ≤ 1.2×)", freeMeanMs, setpointMs, v.TimeRatio)
	default:
		v.Why = fmt.Sprintf("the setpoint binds (unthrottled %.2f ms) and the clients' mean %.2f ms is %+.1f %% off it (rule: ±10 %%)", freeMeanMs, pidMeanMs, v.OffSetpointPct)
	}
	return v
}

func round(x float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.Round(x*p) / p
}
