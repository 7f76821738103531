package control

import (
	"cmp"
	"errors"
	"fmt"
	"time"
)

// ErrNoData is wrapped by the reason a controller holds: the observation had
// a missing or failed measurement.
var ErrNoData = errors.New("no data")

// Statistic names the latency statistic a controller steers by.
type Statistic string

// The statistics of a Signal a controller may use as its process variable.
const (
	StatMean Statistic = "mean" // Signal.Mean (Slacker's choice)
	StatP95  Statistic = "p95"  // Signal.P95
	StatP99  Statistic = "p99"  // Signal.P99
)

// valid reports whether s names a known statistic ("" means StatMean).
func (s Statistic) valid() bool {
	return s == "" || s == StatMean || s == StatP95 || s == StatP99
}

// of returns statistic s of sig ("" is the mean).
func (s Statistic) of(sig Signal) time.Duration {
	if sig.Idle {
		return 0
	}
	switch s {
	case StatP95:
		return sig.P95
	case StatP99:
		return sig.P99
	default:
		return sig.Mean
	}
}

// usable returns nil when sig carries a measurement of stat, or an error
// wrapping ErrNoData naming why not. A latency of zero or less is not a
// measurement (no transaction completes in no time), so it counts as missing:
// reading it as "fast" would speed the migration up blind.
func usable(sig Signal, stat Statistic) error {
	if sig.Err != nil {
		return fmt.Errorf("%w: signal %q: %v", ErrNoData, sig.Name, sig.Err)
	}
	if sig.Idle {
		return nil
	}
	if stat.of(sig) <= 0 {
		return fmt.Errorf("%w: signal %q has no %s latency", ErrNoData, sig.Name, cmp.Or(stat, StatMean))
	}
	return nil
}

// worstLatency returns the largest statistic stat over signals, and the name
// of the signal that has it. Any unusable signal makes the whole observation
// unusable: the missing one might be the worst, so the max over the rest could
// be too optimistic. Idle signals (Signal.Idle) are left out: a latency
// tracker has nothing to track on them, so all idle is no data.
func worstLatency(signals []Signal, stat Statistic) (time.Duration, string, error) {
	var worst time.Duration
	var name string
	n := 0
	for _, s := range signals {
		if err := usable(s, stat); err != nil {
			return 0, "", err
		}
		if s.Idle {
			continue
		}
		n++
		if v := stat.of(s); v > worst {
			worst, name = v, s.Name
		}
	}
	if n == 0 {
		return 0, "", fmt.Errorf("%w: no latency signals", ErrNoData)
	}
	return worst, name, nil
}

// clamp limits v to [lo, hi].
func clamp(v, lo, hi float64) float64 {
	return max(lo, min(hi, v))
}
