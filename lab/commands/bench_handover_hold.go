package commands

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"gonum.org/v1/plot/vg"

	"github.com/sluicedb/sluice/internal/clock"
	"github.com/sluicedb/sluice/lab/chart"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/proxy"
)

// holdConfig is how a run of bench handover holds the tenant: the
// migration's hold deadline and the proxy's grace after a cancel. The base
// run's are the defaults (migration.DefaultHoldDeadline,
// proxy.DefaultHoldGrace); each --variant changes them.
type holdConfig struct {
	Label    string        `json:"label"` // "default", or the variant as given
	Deadline time.Duration `json:"-"`
	Grace    time.Duration `json:"-"`
}

// parseHoldVariant reads a --variant: key=value[,key=value], keys
// hold_deadline (0 to migration.MaxHoldDeadline) and hold_grace (> 0).
// An error names the key at fault.
func parseHoldVariant(spec string) (holdConfig, error) {
	c := holdConfig{Label: spec, Deadline: migration.DefaultHoldDeadline, Grace: proxy.DefaultHoldGrace}
	seen := map[string]bool{}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok || k == "" || v == "":
			return c, fmt.Errorf("%q: want key=value, such as hold_deadline=500ms", strings.TrimSpace(kv))
		case seen[k]:
			return c, fmt.Errorf("%s given twice", k)
		}
		seen[k] = true
		switch k {
		case "hold_deadline":
			d, err := migration.ParseHoldDeadline(v)
			if err != nil {
				return c, fmt.Errorf("hold_deadline: %v", err)
			}
			c.Deadline = d
		case "hold_grace":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 || d > time.Minute {
				return c, fmt.Errorf("hold_grace=%s: want a positive duration up to 1m, such as 2s", v)
			}
			c.Grace = d
		default:
			return c, fmt.Errorf("unknown key %s: want hold_deadline or hold_grace", k)
		}
	}
	return c, nil
}

// handoverSample is one handover of bench handover.
type handoverSample struct {
	Config string  `json:"config"` // holdConfig.Label
	N      int     `json:"n"`      // 1-based, over the whole bench
	Freeze float64 `json:"freeze_ms"`
	// Others is the slowest acknowledged write of the workload that
	// started during the hold (hold → release): the freeze the other
	// sessions saw, ms; -1 if none started then.
	Others         float64 `json:"others_ms"`
	Hold           float64 `json:"hold_ms"` // the hold's own wait for open transactions
	Cancelled      int     `json:"cancelled"`
	Terminated     int     `json:"terminated"`
	TerminatedIdle int     `json:"terminated_idle"`
}

// handoverRun sums up the handovers of one holdConfig.
type handoverRun struct {
	holdConfig
	DeadlineMs  float64 `json:"hold_deadline_ms"`
	GraceMs     float64 `json:"hold_grace_ms"`
	Handovers   int     `json:"handovers"`
	FreezeP50   float64 `json:"freeze_p50_ms"`
	FreezeP99   float64 `json:"freeze_p99_ms"`
	FreezeMax   float64 `json:"freeze_max_ms"`
	OthersP50   float64 `json:"others_p50_ms"`
	OthersP99   float64 `json:"others_p99_ms"`
	OthersMax   float64 `json:"others_max_ms"`
	Cancelled   int     `json:"cancelled"`
	Terminated  int     `json:"terminated"`
	CursorEnded int     `json:"cursor_ended"` // times the long cursor's transaction was ended (57P01 or 57014)
}

// summariseHandovers sums up the samples of c.
func summariseHandovers(c holdConfig, samples []handoverSample, cursorEnded int) handoverRun {
	r := handoverRun{holdConfig: c, DeadlineMs: migMs(time.Time{}, time.Time{}.Add(c.Deadline)), GraceMs: migMs(time.Time{}, time.Time{}.Add(c.Grace)), CursorEnded: cursorEnded}
	var fr, ot []float64
	for _, s := range samples {
		if s.Config != c.Label {
			continue
		}
		r.Handovers++
		fr = append(fr, s.Freeze)
		if s.Others >= 0 {
			ot = append(ot, s.Others)
		}
		r.Cancelled += s.Cancelled
		r.Terminated += s.Terminated
	}
	r.FreezeP50, r.FreezeP99, r.FreezeMax = migRound1(migPercentile(fr, 50)), migRound1(migPercentile(fr, 99)), migRound1(migPercentile(fr, 100))
	r.OthersP50, r.OthersP99, r.OthersMax = migRound1(migPercentile(ot, 50)), migRound1(migPercentile(ot, 99)), migRound1(migPercentile(ot, 100))
	return r
}

// longCursor is one session through the proxy that keeps a transaction
// with a long cursor open, as psycopg2's named cursor does: BEGIN, DECLARE,
// then FETCH 100 every 20 ms (simple protocol), idle inside the transaction
// block in between. When a hold ends its transaction (FATAL 57P01, or a
// cancel's 57014) it counts that and opens a new one at once.
type longCursor struct {
	dsn   string
	ended atomic.Int64
	err   atomic.Pointer[error] // the last unexpected error, for the progress line
}

// run keeps the cursor open until ctx ends.
func (lc *longCursor) run(ctx context.Context) {
	for ctx.Err() == nil {
		err := lc.session(ctx)
		var pe *pgconn.PgError
		switch {
		case ctx.Err() != nil:
			return
		case errors.As(err, &pe) && (pe.Code == "57P01" || pe.Code == "57014"):
			lc.ended.Add(1)
		case err != nil:
			lc.err.Store(&err)
			clock.Sleep(ctx, 100*time.Millisecond)
		}
	}
}

// session opens a connection and reads the cursor until an error.
func (lc *longCursor) session(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, lc.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	exec := func(q string) (pgconn.CommandTag, error) { return conn.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol) }
	for _, q := range []string{"BEGIN", "DECLARE c NO SCROLL CURSOR FOR SELECT * FROM filler"} {
		if _, err := exec(q); err != nil {
			return err
		}
	}
	for {
		tag, err := exec("FETCH 100 FROM c")
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 { // read through: again, in the same transaction
			if _, err := exec("CLOSE c; DECLARE c NO SCROLL CURSOR FOR SELECT * FROM filler"); err != nil {
				return err
			}
		}
		if clock.Sleep(ctx, 20*time.Millisecond) != nil {
			return ctx.Err()
		}
	}
}

// writeHandoverOutputs writes handovers.csv, summary.json, report.md and
// handover.png into dir.
func writeHandoverOutputs(dir, command string, start time.Time, res benchHandoverResult, samples []handoverSample) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench handover: %w", err)
	}
	var rows [][]string
	rows = append(rows, []string{"config", "n", "freeze_ms", "others_ms", "hold_ms", "cancelled", "terminated", "terminated_idle"})
	f1 := func(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }
	for _, s := range samples {
		rows = append(rows, []string{s.Config, strconv.Itoa(s.N), f1(s.Freeze), f1(s.Others), f1(s.Hold),
			strconv.Itoa(s.Cancelled), strconv.Itoa(s.Terminated), strconv.Itoa(s.TerminatedIdle)})
	}
	var csvb strings.Builder
	cw := csv.NewWriter(&csvb)
	cw.WriteAll(rows)
	b, _ := json.MarshalIndent(res, "", "  ")
	for name, data := range map[string][]byte{
		"handovers.csv": []byte(csvb.String()),
		"summary.json":  append(b, '\n'),
		"report.md":     []byte(handoverReport(command, start, res)),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("bench handover: %w", err)
		}
	}
	return writeHandoverPNG(filepath.Join(dir, "handover.png"), res, samples)
}

// handoverReport is report.md: the command, the date and a row per run.
func handoverReport(command string, start time.Time, res benchHandoverResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# bench handover\n\n```sh\n%s\n```\n\n%s UTC. Long cursor open across every handover: %v.\n\n", command, start.UTC().Format("2006-01-02 15:04"), res.LongCursor)
	b.WriteString("| hold | deadline ms | grace ms | handovers | freeze p50 ms | p99 ms | max ms | others' stall p50 ms | p99 ms | max ms | cancelled | terminated | cursor ended |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range res.Runs {
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %d | %d | %d |\n", r.Label, r.DeadlineMs, r.GraceMs, r.Handovers,
			r.FreezeP50, r.FreezeP99, r.FreezeMax, r.OthersP50, r.OthersP99, r.OthersMax, r.Cancelled, r.Terminated, r.CursorEnded)
	}
	fmt.Fprintf(&b, "\nWrites acknowledged %d, missing %d, duplicated %d.\n\nFreeze: the driver's hold → release. Others' stall: per handover, the slowest acknowledged write that started during the hold.\n",
		res.WritesAcknowledged, res.WritesMissing, res.WritesDuplicated)
	return b.String()
}

var chartGrey = color.RGBA{R: 120, G: 120, B: 120, A: 255}

// writeHandoverPNG plots every handover's freeze and the others' stall
// against the handover's number in its run, a panel per run (each on its own scale),
// with the goal's p99.
func writeHandoverPNG(path string, res benchHandoverResult, samples []handoverSample) error {
	var panels []chart.Panel
	for _, r := range res.Runs {
		var xs, fr, ot []float64
		for _, s := range samples {
			if s.Config == r.Label {
				o := s.Others
				if o < 0 { // no write started during the hold: a gap
					o = math.NaN()
				}
				xs, fr, ot = append(xs, float64(len(xs)+1)), append(fr, s.Freeze), append(ot, o)
			}
		}
		p := chart.Panel{Title: fmt.Sprintf("hold %s (deadline %.0f ms, grace %.0f ms)", r.Label, r.DeadlineMs, r.GraceMs), YLabel: "ms"}
		p.Series = append(p.Series,
			chart.Series{Name: fmt.Sprintf("freeze: hold → release (p99 %.0f ms)", r.FreezeP99), X: xs, Y: fr, Points: true},
			chart.Series{Name: fmt.Sprintf("others' stall: slowest write held (p99 %.0f ms)", r.OthersP99), X: xs, Y: ot, Points: true, Dashed: true})
		if len(xs) > 0 {
			p.Series = append(p.Series, chart.Series{Name: "goal: freeze p99 ≤ 250 ms", X: []float64{xs[0], xs[len(xs)-1]}, Y: []float64{250, 250}, Dashed: true, Color: chartGrey})
		}
		panels = append(panels, p)
	}
	title := "sluice bench handover"
	if res.LongCursor {
		title += ": one session with a long cursor open across every handover"
	}
	c := chart.Chart{Title: title, XLabel: "handover of the run", Panels: panels, LegendOutside: true, LegendWidth: 4 * vg.Inch}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench handover: %w", err)
	}
	if err := chart.WritePNG(f, c); err != nil {
		f.Close()
		return fmt.Errorf("bench handover: %w", err)
	}
	return f.Close()
}
