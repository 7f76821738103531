package experiment

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/lab/fio"
	"github.com/sluicedb/sluice/lab/testbed"
)

// BufferingOptions configure Buffering, the thesis's experiment (§4.2,
// Fig. 10–12, Table 2) on the lab's bed.
type BufferingOptions struct {
	Common
	// Model is the trained model file the bed's agents load (its
	// Evaluation gives the classifier's figures); ModelPath is where it is.
	Model     control.ModelFile
	ModelPath string
	// FixedRate is the fixed-rate method's rate, bytes/s; default the top
	// speed (Common.MaxRate).
	FixedRate float64
	// SetpointMs is the PID's setpoint; default 3 × the workload's
	// baseline median 3 s window.
	SetpointMs float64
	// FioFor is how long each fio run lasts; default 15 s.
	FioFor time.Duration
	// LateStart is the later of fio's two starts after the migration's
	// (the thesis's 100 s, scaled to this bed); default 12 s.
	LateStart time.Duration
	// Profiles are the fio workloads; default fio.Profiles.
	Profiles []fio.Profile
	// Device is the data disk's /proc/diskstats name; default the bed's.
	Device string
}

// The methods compared, in report order.
var BufferingMethods = []string{"unthrottled", "fixed", "pid", "buffering"}

// BufferingRow is one method under one fio profile and start.
type BufferingRow struct {
	Method  string  `json:"method"`
	Profile string  `json:"profile"`
	FioAtS  float64 `json:"fio_start_s"` // fio's start after the migration's, s
	// MigrationSeconds is the migration's duration (start to commit), and
	// MigrationSecondsNormalized it ÷ the same method's migration alone.
	MigrationSeconds           float64 `json:"migration_seconds"`
	MigrationSecondsNormalized float64 `json:"migration_seconds_normalized"`
	// ColocatedThroughput is fio's mean throughput over the seconds it ran
	// beside the migration (MB/s), and ColocatedThroughputNormalized it ÷
	// fio alone's.
	ColocatedThroughput           float64 `json:"colocated_mbps"`
	ColocatedThroughputNormalized float64 `json:"colocated_throughput_normalized"`
	OverlapSeconds                int     `json:"overlap_s"`
	LockedSteps                   int     `json:"locked_steps,omitempty"` // buffering: steps the controller was locked
	res                           *TrialResult
	fio                           fio.Result
	fioStart                      float64 // on the trial's workload clock
}

// BufferingResult is Buffering's output.
type BufferingResult struct {
	Command              string             `json:"command"`
	Machine              string             `json:"machine"`
	Bed                  string             `json:"bed"`
	Started              time.Time          `json:"started"`
	Device               string             `json:"device"`
	TenantBytes          int64              `json:"tenant_bytes"`
	MaxRate              float64            `json:"max_rate"`
	FixedRate            float64            `json:"fixed_rate"`
	SetpointMs           float64            `json:"pid_setpoint_ms"`
	FioSeconds           float64            `json:"fio_seconds"`
	LateStartS           float64            `json:"late_start_s"`
	Profile              string             `json:"profile"`
	Model                string             `json:"model"`
	ClassifierAccuracy   float64            `json:"classifier_accuracy"`
	ClassifierF1         float64            `json:"classifier_f1"`
	DefaultModelAccuracy float64            `json:"default_model_accuracy"`
	DefaultModelF1       float64            `json:"default_model_f1"`
	AloneSeconds         map[string]float64 `json:"migration_alone_seconds"`
	FioNominalMBps       map[string]float64 `json:"fio_alone_mbps"` // mean of the runs before and after
	FioAloneBefore       map[string]float64 `json:"fio_alone_before_mbps"`
	FioAloneAfter        map[string]float64 `json:"fio_alone_after_mbps"`
	Methods              []BufferingRow     `json:"methods"`
	Goals                []Goal             `json:"goals"`
}

// Goal is one of the targets, measured.
type Goal struct {
	Name string `json:"name"`
	Met  bool   `json:"met"`
	Note string `json:"note"`
}

// Buffering runs the experiment on bed: each method's migration alone, each
// fio profile alone, then every method under every profile started with the
// migration and LateStart into it. The tenant's files are dropped from the
// page cache before each migration; fio runs in the source server's disk
// group (sharing its read cap).
func Buffering(ctx context.Context, bed *testbed.Bed, o BufferingOptions) (*BufferingResult, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if o.MaxRate == 0 {
		o.MaxRate = o.Profile.MaxRate
	}
	if o.FixedRate == 0 {
		o.FixedRate = o.MaxRate
	}
	if o.FioFor == 0 {
		o.FioFor = 15 * time.Second
	}
	if o.LateStart == 0 {
		o.LateStart = 12 * time.Second
	}
	if o.Profiles == nil {
		o.Profiles = fio.Profiles
	}
	say := o.Progress
	res := &BufferingResult{Command: o.Command, Machine: Machine(), Bed: bed.Describe(), Started: time.Now().UTC(),
		TenantBytes: o.Size, MaxRate: o.MaxRate, FixedRate: o.FixedRate, FioSeconds: o.FioFor.Seconds(),
		LateStartS: o.LateStart.Seconds(), Profile: o.Profile.Label(), Model: o.ModelPath,
		AloneSeconds: map[string]float64{}, FioNominalMBps: map[string]float64{},
		FioAloneBefore: map[string]float64{}, FioAloneAfter: map[string]float64{}}
	if ev := o.Model.Evaluation; ev != nil {
		res.ClassifierAccuracy, res.ClassifierF1 = ev.Accuracy, ev.F1
		res.DefaultModelAccuracy, res.DefaultModelF1 = ev.DefaultAccuracy, ev.DefaultF1
	}
	fioDir, err := os.MkdirTemp(bed.Opt.Root, "fio-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(fioDir)
	if o.Device == "" {
		if o.Device, err = DiskName(fioDir); err != nil {
			return nil, err
		}
	}
	res.Device = o.Device
	say("creating the tenant (%.0f MB)", float64(o.Size)/1e6)
	t, err := bed.CreateTenant(ctx, 0, "mover", o.Size, o.Seed)
	if err != nil {
		return nil, err
	}
	if o.SetpointMs == 0 {
		base, err := Baseline(ctx, t, o.Workload, 10*time.Second, o.Seed)
		if err != nil {
			return nil, err
		}
		o.SetpointMs = round(3*base.Window50, 1)
		say("baseline: median 3 s window %.2f ms; PID setpoint %.1f ms", base.Window50, o.SetpointMs)
	}
	res.SetpointMs = o.SetpointMs
	b := bufferingRun{o: o, bed: bed, t: t, fioDir: fioDir}
	if err := b.fioAlone(ctx, res.FioAloneBefore); err != nil {
		return nil, err
	}
	for _, m := range BufferingMethods {
		row, err := b.trial(ctx, m, nil, 0)
		if err != nil {
			return res, err
		}
		res.AloneSeconds[m] = row.MigrationSeconds
		say("%s alone: %.1f s", m, row.MigrationSeconds)
	}
	for _, p := range o.Profiles {
		for _, at := range []time.Duration{0, o.LateStart} {
			for _, m := range BufferingMethods {
				row, err := b.trial(ctx, m, &p, at)
				if err != nil {
					return res, err
				}
				row.MigrationSecondsNormalized = round(row.MigrationSeconds/res.AloneSeconds[m], 3)
				// Provisional, against the first alone run (a run cut short
				// keeps it); replaced by the mean of both at the end.
				row.ColocatedThroughputNormalized = round(row.ColocatedThroughput/res.FioAloneBefore[p.Name], 3)
				say("%s, fio %s at %.0f s: migration %.1f s (×%.2f), fio %.2f MB/s (÷ first alone run %.3f, over %d s)", m, p.Name, at.Seconds(),
					row.MigrationSeconds, row.MigrationSecondsNormalized, row.ColocatedThroughput, row.ColocatedThroughput/res.FioAloneBefore[p.Name], row.OverlapSeconds)
				res.Methods = append(res.Methods, row)
			}
		}
	}
	// fio alone again at the end: its throughput drifts with the host's
	// other disk users, and the nominal is the mean of both runs. The
	// normalised figures are computed from it once all trials ran.
	if err := b.fioAlone(ctx, res.FioAloneAfter); err != nil {
		return res, err
	}
	for _, p := range o.Profiles {
		res.FioNominalMBps[p.Name] = round((res.FioAloneBefore[p.Name]+res.FioAloneAfter[p.Name])/2, 3)
	}
	for i := range res.Methods {
		r := &res.Methods[i]
		r.ColocatedThroughputNormalized = round(r.ColocatedThroughput/res.FioNominalMBps[r.Profile], 3)
	}
	res.Goals = bufferingGoals(res)
	return res, nil
}

// fioAlone runs each fio profile alone for FioFor in the tenant's server's
// disk group and records its mean throughput, MB/s, in out.
func (b *bufferingRun) fioAlone(ctx context.Context, out map[string]float64) error {
	for _, p := range b.o.Profiles {
		w := fio.Workload{Profile: p, Dir: b.fioDir, Duration: b.o.FioFor}
		if err := w.Prepare(ctx); err != nil {
			return err
		}
		from, _, err := b.bed.Owner(ctx, b.t)
		if err != nil {
			return err
		}
		fr, err := startFio(ctx, w, b.bed.Servers[from], 0).wait()
		if err != nil {
			return err
		}
		out[p.Name] = round(fr.Mean(0, len(fr.PerSecond))/1e6, 3)
		b.o.Progress("fio %s alone: %.2f MB/s", p.Name, out[p.Name])
	}
	return nil
}

// bufferingRun is what Buffering's trials share.
type bufferingRun struct {
	o      BufferingOptions
	bed    *testbed.Bed
	t      testbed.Tenant
	fioDir string
}

// request is method m's migration request.
func (b *bufferingRun) request(m string) agentclient.StartMigration {
	o := b.o
	prof, _ := json.Marshal(o.Profile)
	switch m {
	case "fixed":
		return agentclient.StartMigration{Rate: o.FixedRate}
	case "pid":
		return agentclient.StartMigration{Control: &agentclient.Control{Controller: "pid", SetpointMs: o.SetpointMs, MaxRate: o.MaxRate, Profile: prof}}
	case "buffering":
		return agentclient.StartMigration{Control: &agentclient.Control{Controller: "interference", Device: o.Device, MaxRate: o.MaxRate, Profile: prof}}
	}
	return agentclient.StartMigration{}
}

// trial migrates the tenant by method m, with fio profile p (nil: none)
// started at after the migration's start.
func (b *bufferingRun) trial(ctx context.Context, m string, p *fio.Profile, at time.Duration) (BufferingRow, error) {
	from, _, err := b.bed.Owner(ctx, b.t)
	if err != nil {
		return BufferingRow{}, err
	}
	row := BufferingRow{Method: m, FioAtS: at.Seconds()}
	var fr *fioRun
	var migAt time.Time
	tr := Trial{Bed: b.bed, Tenant: b.t, To: 1 - from, Workload: b.o.Workload, Warmup: b.o.Warmup, Cooldown: time.Second,
		Migration: b.request(m), TargetCPUs: b.o.TargetCPUs, Progress: b.o.Progress,
		AtStart: func(ctx context.Context, from int) error {
			if err := DropCache(ctx, b.bed, b.t); err != nil {
				return err
			}
			migAt = time.Now()
			if p != nil {
				row.Profile = p.Name
				fr = startFio(ctx, fio.Workload{Profile: *p, Dir: b.fioDir, Duration: b.o.FioFor}, b.bed.Servers[from], at)
			}
			return nil
		}}
	res, err := tr.Run(ctx)
	var fres fio.Result
	if fr != nil {
		var ferr error
		if fres, ferr = fr.wait(); err == nil {
			err = ferr
		}
	}
	if err != nil {
		return row, err
	}
	row.res, row.fio = res, fres
	row.MigrationSeconds = round(res.MigEnd-res.MigStart, 2)
	for _, pt := range res.Loop {
		if strings.Contains(pt.Reason, "locked") {
			row.LockedSteps++
		}
	}
	if fr != nil {
		// fio's second i is [start+i, start+i+1); count the seconds that
		// began before the migration ended.
		row.fioStart = res.MigStart + fres.Start.Sub(migAt).Seconds()
		k := int(math.Ceil(migAt.Add(time.Duration(row.MigrationSeconds * float64(time.Second))).Sub(fres.Start).Seconds()))
		k = max(1, min(k, len(fres.PerSecond)))
		row.OverlapSeconds = k
		row.ColocatedThroughput = round(fres.Mean(0, k)/1e6, 3)
	}
	return row, nil
}

// bufferingGoals checks the targets on res.
func bufferingGoals(res *BufferingResult) []Goal {
	var gs []Goal
	worst, worstAt := math.Inf(1), ""
	for _, r := range res.Methods {
		if r.Method == "buffering" && r.ColocatedThroughputNormalized < worst {
			worst, worstAt = r.ColocatedThroughputNormalized, fmt.Sprintf("%s at %.0f s", r.Profile, r.FioAtS)
		}
	}
	gs = append(gs, Goal{Name: "buffering: co-located throughput >= 0.95 of nominal for every fio profile", Met: worst >= 0.95,
		Note: fmt.Sprintf("lowest %.3f (%s)", worst, worstAt)})
	slow, slowAt := 0.0, ""
	for _, r := range res.Methods {
		if r.Method == "buffering" && r.FioAtS > 0 && r.MigrationSecondsNormalized > slow {
			slow, slowAt = r.MigrationSecondsNormalized, r.Profile
		}
	}
	gs = append(gs, Goal{Name: fmt.Sprintf("buffering: migration <= 1.2 x alone when fio starts after the buffer filled (%.0f s)", res.LateStartS),
		Met: slow <= 1.2, Note: fmt.Sprintf("highest %.3f (%s)", slow, slowAt)})
	hurt, hurtAt := math.Inf(1), ""
	for _, r := range res.Methods {
		if r.Method == "unthrottled" && r.ColocatedThroughputNormalized < hurt {
			hurt, hurtAt = r.ColocatedThroughputNormalized, fmt.Sprintf("%s at %.0f s", r.Profile, r.FioAtS)
		}
	}
	gs = append(gs, Goal{Name: "unthrottled hurts the co-located workload in the same run (< 0.95)", Met: hurt < 0.95,
		Note: fmt.Sprintf("lowest %.3f (%s)", hurt, hurtAt)})
	gs = append(gs, Goal{Name: "the trained model beats the thesis's coefficients on held-out samples", Met: res.ClassifierAccuracy > res.DefaultModelAccuracy && res.ClassifierF1 > res.DefaultModelF1,
		Note: fmt.Sprintf("accuracy %.3f vs %.3f, F1 %.3f vs %.3f", res.ClassifierAccuracy, res.DefaultModelAccuracy, res.ClassifierF1, res.DefaultModelF1)})
	return gs
}
