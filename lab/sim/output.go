package sim

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluicedb/sluice/internal/asciiplot"
)

// Summary is the JSON form of a run (`sluice sim --json`): exactly these
// keys. Rates are bytes/s.
type Summary struct {
	Scenario          string  `json:"scenario"`
	Controller        string  `json:"controller"`
	Seed              uint64  `json:"seed"`
	SetpointMS        float64 `json:"setpoint_ms,omitempty"` // pid and interference only (SteersToSetpoint)
	IdleLatencyMS     float64 `json:"idle_latency_ms"`
	MeanLatencyMS     float64 `json:"mean_latency_ms"`
	P95LatencyMS      float64 `json:"p95_latency_ms"`
	P99LatencyMS      float64 `json:"p99_latency_ms"`
	ViolationFraction float64 `json:"violation_fraction"`
	MigrationSeconds  float64 `json:"migration_seconds"`
	MeanRate          float64 `json:"mean_rate"`
	Completed         bool    `json:"completed"`
}

// Summary returns r's JSON figures.
func (r Result) Summary() Summary {
	sp := msOf(r.Setpoint)
	if !SteersToSetpoint(r.Controller) {
		sp = 0
	}
	return Summary{
		Scenario:          r.Scenario,
		Controller:        r.Controller,
		Seed:              r.Seed,
		SetpointMS:        sp,
		IdleLatencyMS:     msOf(r.IdleLatency),
		MeanLatencyMS:     msOf(r.MeanLatency),
		P95LatencyMS:      msOf(r.P95Latency),
		P99LatencyMS:      msOf(r.P99Latency),
		ViolationFraction: round(r.ViolationFraction, 4),
		MigrationSeconds:  round(r.MigrationSeconds, 3),
		MeanRate:          math.Round(r.MeanRate),
		Completed:         r.Completed,
	}
}

// msOf is d in milliseconds, rounded to microseconds.
func msOf(d time.Duration) float64 { return round(float64(d)/1e6, 3) }

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// WriteCSV writes r's 1 s time series: one row per window, with the idle
// twin's latency alongside and, with several stores, one latency column per
// store.
func WriteCSV(w io.Writer, r Result) error {
	cw := csv.NewWriter(w)
	head := []string{"t_s", "phase", "load", "latency_ms", "idle_latency_ms", "observed_ms", "setpoint_ms",
		"rate_Bps", "command_Bps", "read_Bps", "prefetch_Bps", "buffered_B", "moved_B", "queue", "count", "hold", "reason"}
	multi := len(r.Stores) > 1
	if multi {
		for _, s := range r.Stores {
			head = append(head, s.Name+"_latency_ms", s.Name+"_contract_ms")
		}
	}
	if err := cw.Write(head); err != nil {
		return fmt.Errorf("sim: write csv: %w", err)
	}
	idle := map[float64]time.Duration{}
	for _, p := range r.Idle {
		idle[p.T] = p.Latency
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, p := range r.Points {
		row := []string{f(p.T), p.Phase, f(round(p.Load, 4)), f(msOf(p.Latency)), f(msOf(idle[p.T])), f(msOf(p.Observed)),
			f(msOf(r.Setpoint)), f(math.Round(p.Rate)), f(math.Round(p.Command)), f(math.Round(p.Read)),
			f(math.Round(p.Prefetch)), f(math.Round(p.Buffered)), f(math.Round(p.Moved)),
			strconv.Itoa(p.Queue), strconv.Itoa(p.Count), strconv.FormatBool(p.Hold), p.Reason}
		if multi {
			for i, s := range r.Stores {
				row = append(row, f(msOf(p.Stores[i].Latency)), f(msOf(s.Contract)))
			}
		}
		if err := cw.Write(row); err != nil {
			return fmt.Errorf("sim: write csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("sim: write csv: %w", err)
	}
	return nil
}

// ASCIIPlot renders r's latency (with the setpoint) and rate over time as two
// terminal charts of the given width.
func ASCIIPlot(r Result, width int) string {
	var lat, idle, rate []float64
	idleAt := map[float64]time.Duration{}
	for _, p := range r.Idle {
		idleAt[p.T] = p.Latency
	}
	for _, p := range r.Points {
		if p.T <= 0 {
			continue
		}
		lat = append(lat, float64(p.Latency)/1e6)
		idle = append(idle, float64(idleAt[p.T])/1e6)
		rate = append(rate, p.Rate/1e6)
	}
	// Cap the latency axis so a runaway queue does not flatten the rest.
	top := 4 * float64(r.Setpoint) / 1e6
	for i, v := range lat {
		lat[i] = math.Min(v, top)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "latency (ms, 1 s windows, capped at %.0f) vs time since the migration started\n", top)
	b.WriteString(asciiplot.RenderOpts([]asciiplot.Series{
		{Name: "idle twin", Y: idle, Mark: '.'},
		{Name: "latency", Y: lat, Mark: '*'},
	}, asciiplot.Options{Width: width, Height: 12, XLabel: "s", Refs: []asciiplot.Ref{{Name: "setpoint", Y: float64(r.Setpoint) / 1e6}}}))
	b.WriteString("migration rate (MB/s)\n")
	b.WriteString(asciiplot.RenderOpts([]asciiplot.Series{{Name: "rate", Y: rate, Mark: '#'}},
		asciiplot.Options{Width: width, Height: 6, XLabel: "s", YMin: 0, YMax: math.Max(1, maxOf(rate))}))
	return b.String()
}

func maxOf(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = math.Max(m, x)
	}
	return m
}
