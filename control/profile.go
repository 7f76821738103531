package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Profile is the control loop's tuning: everything about how sluice steers a
// migration's copy speed from the latency its clients see, except what the
// operator decides (the setpoint, its statistic, and the top speed, for which
// the profile only holds a default). `sluice migrate`, the agent API, `sluice
// demo` and every benchmark start from the same profile, DefaultProfile, so
// what users run is what was measured; docs/control.md gives each field's
// evidence.
//
// A profile is a plain value: JSON for the agent API and the catalog, YAML or
// JSON in a file (LoadProfile). A file, or an API request, names a base
// profile and overrides some of its fields; the rest keep the base's values.
type Profile struct {
	// Name is the built-in profile this one is or starts from (Profiles).
	Name string `json:"name" yaml:"name"`

	// Kp, Ki, Kd are the PID's velocity-form gains per step, with the error
	// normalised by the setpoint and the output a fraction of MaxRate
	// (PIDParams). Each >= 0; Ki > 0.
	Kp float64 `json:"kp" yaml:"kp"`
	Ki float64 `json:"ki" yaml:"ki"`
	Kd float64 `json:"kd" yaml:"kd"`
	// Initial is the output from the copy's first byte until the loop's
	// first step that acts, a fraction of the top speed in [0, 1].
	Initial float64 `json:"initial" yaml:"initial"`
	// StartGrowth is the slow start's growth per step (> 1), or 1 for no
	// slow start (PIDParams.StartGrowth); in [1, 4].
	StartGrowth float64 `json:"start_growth" yaml:"start_growth"`
	// StartExit places the slow start's exit between the idle latency and
	// the setpoint, a fraction in (0, 1] (PIDParams.StartExit).
	StartExit float64 `json:"start_exit" yaml:"start_exit"`
	// StartBackoff is how many steps of its growth the slow start takes
	// back when it ends owing latency, in [0, MaxStartBackoff]
	// (PIDParams.StartBackoff).
	StartBackoff int `json:"start_backoff" yaml:"start_backoff"`
	// RearmGrowth is the growth per step back to the rate that held the
	// setpoint after a pause, in [1, 4]; 1 = the slow start's growth to
	// half the peak (PIDParams.RearmGrowth).
	RearmGrowth float64 `json:"rearm_growth" yaml:"rearm_growth"`
	// MeanHorizon makes the setpoint a contract on the migration's mean
	// latency, steps in [0, 3600]; 0 = each window against the setpoint
	// (PIDParams.MeanHorizon).
	MeanHorizon int `json:"mean_horizon" yaml:"mean_horizon"`
	// MeanBand bounds the mean contract's working setpoint, a fraction of
	// the setpoint in (0, 1) (PIDParams.MeanBand).
	MeanBand float64 `json:"mean_band" yaml:"mean_band"`
	// IdleFloor is the lowest the mean contract repays at, a fraction of
	// the way from the idle latency to the setpoint in [0, 1)
	// (PIDParams.IdleFloor).
	IdleFloor float64 `json:"idle_floor" yaml:"idle_floor"`
	// LearnReserve has the mean contract reserve the handover's cost to the
	// clients: the median excess of the proxy's last ReserveHistory
	// measured handovers of the tenant (PIDParams.Reserve).
	LearnReserve bool `json:"learn_reserve" yaml:"learn_reserve"`

	// StepMs is the control period, ms, in [100, 60000]. The gains are per
	// step: a profile's gains hold for its own period only.
	StepMs float64 `json:"step_ms" yaml:"step_ms"`
	// SettleMs is how long after the copy's first byte a latency
	// controller holds Initial (Governor): the snapshot's start-up — its
	// checkpoint — is then out of the proxy's latency window. ms, >= 0.
	SettleMs float64 `json:"settle_ms" yaml:"settle_ms"`
	// CatchUp guarantees that catch-up ends (Governor).
	CatchUp CatchUpParams `json:"catch_up" yaml:"catch_up"`

	// MaxRate is the top speed when the operator names none, bytes/s, > 0.
	MaxRate float64 `json:"max_rate" yaml:"max_rate"`

	// Interference tunes the interference controller (migration
	// buffering; InterferenceParams).
	Interference InterferenceProfile `json:"interference" yaml:"interference"`
}

// InterferenceProfile is the interference controller's tuning
// (InterferenceParams documents each law; docs/control.md the evidence).
type InterferenceProfile struct {
	// Threshold is the probability of interference the read rate is
	// steered toward, in (0, 1).
	Threshold float64 `json:"threshold" yaml:"threshold"`
	// High and Low are the lock and unlock probabilities,
	// 0 <= Low < High <= 1.
	High float64 `json:"high" yaml:"high"`
	Low  float64 `json:"low" yaml:"low"`
	// LockAfter and UnlockAfter are the consecutive steps above High that
	// lock and below Low that unlock, each in [1, 100].
	LockAfter   int `json:"lock_after" yaml:"lock_after"`
	UnlockAfter int `json:"unlock_after" yaml:"unlock_after"`
	// MaxLocked bounds a lock, steps in [0, 3600]; 0 = unbounded
	// (InterferenceParams.MaxLocked).
	MaxLocked int `json:"max_locked" yaml:"max_locked"`
	// Ki is the integral gain per step, fraction of the maximum read rate
	// per unit of probability error, in (0, 1].
	Ki float64 `json:"ki" yaml:"ki"`
	// PrefetchFactor is the maximum read rate as a multiple of the top
	// speed, in [1, 16].
	PrefetchFactor float64 `json:"prefetch_factor" yaml:"prefetch_factor"`
	// Initial is the output from the first byte, a fraction of the maximum
	// read rate in [0, 1].
	Initial float64 `json:"initial" yaml:"initial"`
	// BufferMB is the memory cap of the read-ahead buffer, MiB, in
	// [1, 4096]: what the reader may read ahead of the sender while the
	// disk is calm and the sender then sends from while it is busy. A full
	// buffer pauses the reader (transfer.SendOptions.ReadAhead); migrations
	// under the other controllers keep transfer.DefaultReadAhead.
	BufferMB float64 `json:"buffer_mb" yaml:"buffer_mb"`
}

// ReadAhead is the interference controller's read-ahead buffer cap, bytes
// (InterferenceProfile.BufferMB).
func (p Profile) ReadAhead() int64 { return int64(p.Interference.BufferMB * (1 << 20)) }

// InterferenceParams returns the interference controller's parameters of
// profile p for model m and a top speed of maxRate bytes/s.
func (p Profile) InterferenceParams(m Model, maxRate float64) InterferenceParams {
	ip := p.Interference
	return InterferenceParams{
		Model: m, Threshold: ip.Threshold, High: ip.High, Low: ip.Low,
		LockAfter: ip.LockAfter, UnlockAfter: ip.UnlockAfter, MaxLocked: ip.MaxLocked,
		Ki: ip.Ki, MaxRate: maxRate, PrefetchFactor: ip.PrefetchFactor, Initial: ip.Initial,
	}
}

// CatchUpParams configure the floor a Governor raises under the controller's
// rate in catch-up, so that the standby's replay lag drains even when the
// latency controller would hold the rate below the rate the source writes
// WAL at (Slacker's deltas converge only if the copy outruns the writes).
type CatchUpParams struct {
	// Patience is how many steps the lag's pace is judged over, >= 1.
	Patience int `json:"patience" yaml:"patience"`
	// DrainMs is the longest the lag may take to drain at that pace, ms,
	// > 0; the floor rises when it would take longer.
	DrainMs float64 `json:"drain_ms" yaml:"drain_ms"`
	// Share is the share of the copy's duration the drain may take instead
	// of DrainMs, when that is longer: the lag grows with the copy. [0, 1].
	Share float64 `json:"share" yaml:"share"`
	// Boost is the factor the floor rises by at least, >= 1.
	Boost float64 `json:"boost" yaml:"boost"`
	// Entry is how many of the copy's last steps' mean rate is catch-up's
	// first floor (scaled down by setpoint ÷ latency when over), >= 0; 0 =
	// no entry floor.
	Entry int `json:"entry" yaml:"entry"`
	// MinFloor is the least floor once one is needed, bytes/s, >= 0.
	MinFloor float64 `json:"min_floor" yaml:"min_floor"`
}

// ReserveHistory is how many of a tenant's last measured handovers a learned
// reserve (Profile.LearnReserve) is the median of.
const ReserveHistory = 3

// The built-in profiles.
var (
	// sluiceProfile is what sluice ships and benchmarks: Slacker's law with
	// gains for a plant whose latency is flat over most of the rate range
	// and bends up near its knee, a slow start to find the knee fast, and
	// the setpoint held as the migration's mean (docs/control.md).
	sluiceProfile = Profile{
		Name: "sluice",
		Kp:   0.02, Ki: 0.08, Kd: 0,
		Initial:     0.25,
		StartGrowth: 1.12, StartExit: 0.5, StartBackoff: 3, RearmGrowth: 1.5,
		MeanHorizon: 20, MeanBand: 0.5, IdleFloor: 0.5, LearnReserve: true,
		StepMs: 1000, SettleMs: 3000,
		CatchUp:      defaultCatchUp,
		MaxRate:      120e6,
		Interference: defaultInterference,
	}
	// slackerProfile is the paper's controller (Barker et al., EDBT 2012,
	// §5.3): gains found by Ziegler–Nichols on their MySQL testbed, a tenth
	// of full speed to start, each 3 s window against the setpoint.
	slackerProfile = Profile{
		Name: "slacker",
		Kp:   0.025, Ki: 0.005, Kd: 0.015,
		Initial:     0.1,
		StartGrowth: 1, StartExit: 0.5, RearmGrowth: 1, MeanBand: 0.5,
		StepMs: 1000, SettleMs: 3000,
		CatchUp:      defaultCatchUp,
		MaxRate:      120e6,
		Interference: defaultInterference,
	}
	// defaultInterference is the thesis's threshold and hysteresis (§4.2)
	// with sluice's gain, prefetch factor and buffer (docs/control.md).
	defaultInterference = InterferenceProfile{
		Threshold: 0.5, High: 0.5, Low: 0.15, LockAfter: 2, UnlockAfter: 3, MaxLocked: 30,
		Ki: 0.1, PrefetchFactor: 2, Initial: 0.5, BufferMB: 256,
	}
	defaultCatchUp = CatchUpParams{Patience: 5, DrainMs: 20000, Share: 0.1, Boost: 1.5, Entry: 10, MinFloor: 1 << 20}
)

// DefaultProfileName names the profile used where none is named.
const DefaultProfileName = "sluice"

// Profiles lists the built-in profiles' names, the default first.
func Profiles() []string { return []string{"sluice", "slacker"} }

// DefaultProfile returns the profile used where none is named.
func DefaultProfile() Profile { return sluiceProfile }

// ProfileNamed returns the built-in profile name ("" is the default).
func ProfileNamed(name string) (Profile, error) {
	switch name {
	case "", "sluice":
		return sluiceProfile, nil
	case "slacker":
		return slackerProfile, nil
	}
	return Profile{}, fmt.Errorf("control: unknown profile %q (want %s, or a profile file)", name, strings.Join(Profiles(), " or "))
}

// LoadProfile reads a profile from YAML or JSON: a base (name, default the
// default profile) and the fields that differ from it. An unknown field, a
// value of the wrong type or out of range is an error naming it.
func LoadProfile(r io.Reader) (Profile, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return Profile{}, fmt.Errorf("control: profile: %w", err)
	}
	var head struct {
		Name string `yaml:"name"`
	}
	if err := yaml.Unmarshal(b, &head); err != nil {
		return Profile{}, fmt.Errorf("control: profile: %v", yamlError(err, b))
	}
	p, err := ProfileNamed(head.Name)
	if err != nil {
		return Profile{}, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil && !errors.Is(err, io.EOF) {
		return Profile{}, fmt.Errorf("control: profile: %v", yamlError(err, b))
	}
	if err := p.Validate(); err != nil {
		return Profile{}, err
	}
	return p, nil
}

// ProfileFromJSON is LoadProfile for JSON, as the agent API carries a
// profile: a base by name and the fields that differ. Empty input is the
// default profile.
func ProfileFromJSON(b []byte) (Profile, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return DefaultProfile(), nil
	}
	var head struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return Profile{}, fmt.Errorf("control: profile: %w", err)
	}
	p, err := ProfileNamed(head.Name)
	if err != nil {
		return Profile{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Profile{}, fmt.Errorf("control: profile: %w", err)
	}
	if err := p.Validate(); err != nil {
		return Profile{}, err
	}
	return p, nil
}

// yamlError is err on one line, each of yaml.v3's per-field errors named by
// the key on its line of src.
func yamlError(err error, src []byte) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	lines := strings.Split(string(src), "\n")
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = m
		var n int
		if _, err := fmt.Sscanf(m, "line %d:", &n); err == nil && n >= 1 && n <= len(lines) {
			if key, _, ok := strings.Cut(strings.TrimSpace(lines[n-1]), ":"); ok && !strings.Contains(m, " field ") {
				msgs[i] = fmt.Sprintf("%s (%s)", m, strings.Trim(key, `"`))
			}
		}
	}
	return strings.Join(msgs, "; ")
}

// Validate reports the first field out of range, naming it as in a profile
// file.
func (p Profile) Validate() error {
	if _, err := ProfileNamed(p.Name); err != nil {
		return err
	}
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("control: profile %s: %s %v: want %s", p.Name, field, v, want)
	}
	c := p.CatchUp
	switch {
	case !finite(p.MaxRate) || p.MaxRate <= 0:
		return bad("max_rate", p.MaxRate, "a positive number of bytes/s")
	case !finite(p.StepMs) || p.StepMs < 100 || p.StepMs > 60000:
		return bad("step_ms", p.StepMs, "100 to 60000")
	case !finite(p.SettleMs) || p.SettleMs < 0 || p.SettleMs > 600000:
		return bad("settle_ms", p.SettleMs, "0 to 600000")
	case c.Patience < 1 || c.Patience > 600:
		return bad("catch_up.patience", c.Patience, "1 to 600 steps")
	case !finite(c.DrainMs) || c.DrainMs <= 0:
		return bad("catch_up.drain_ms", c.DrainMs, "> 0")
	case !finite(c.Share) || c.Share < 0 || c.Share > 1:
		return bad("catch_up.share", c.Share, "a fraction in [0, 1]")
	case !finite(c.Boost) || c.Boost < 1 || c.Boost > 100:
		return bad("catch_up.boost", c.Boost, "1 to 100")
	case c.Entry < 0 || c.Entry > 600:
		return bad("catch_up.entry", c.Entry, "0 to 600 steps")
	case !finite(c.MinFloor) || c.MinFloor < 0:
		return bad("catch_up.min_floor", c.MinFloor, ">= 0 bytes/s")
	case !finite(p.Interference.BufferMB) || p.Interference.BufferMB < 1 || p.Interference.BufferMB > 4096:
		return bad("interference.buffer_mb", p.Interference.BufferMB, "1 to 4096 MiB")
	case p.Interference.LockAfter > 100 || p.Interference.UnlockAfter > 100:
		return bad("interference.lock_after/unlock_after", fmt.Sprintf("%d/%d", p.Interference.LockAfter, p.Interference.UnlockAfter), "1 to 100 steps")
	case p.Interference.MaxLocked < 0 || p.Interference.MaxLocked > 3600:
		return bad("interference.max_locked", p.Interference.MaxLocked, "0 (unbounded) to 3600 steps")
	case !finite(p.Interference.Ki) || p.Interference.Ki > 1:
		return bad("interference.ki", p.Interference.Ki, "(0, 1]")
	case !finite(p.Interference.PrefetchFactor) || p.Interference.PrefetchFactor > 16:
		return bad("interference.prefetch_factor", p.Interference.PrefetchFactor, "1 to 16")
	case p.StartGrowth == 0:
		return bad("start_growth", p.StartGrowth, "1 (none) to 4")
	}
	pp := p.PID(time.Second, p.MaxRate, StatMean)
	if err := pp.Validate(); err != nil {
		return fmt.Errorf("control: profile %s: %s", p.Name, strings.TrimPrefix(err.Error(), "control: pid: "))
	}
	if err := p.InterferenceParams(DefaultModel(), p.MaxRate).Validate(); err != nil {
		return fmt.Errorf("control: profile %s: %s", p.Name, strings.TrimPrefix(err.Error(), "control: interference: "))
	}
	return nil
}

// PID returns the PID parameters of profile p for a setpoint of statistic
// stat and a top speed of maxRate bytes/s (the reserve left 0: it is learned
// per migration).
func (p Profile) PID(setpoint time.Duration, maxRate float64, stat Statistic) PIDParams {
	return PIDParams{
		Setpoint: setpoint, MaxRate: maxRate, Stat: stat,
		Kp: p.Kp, Ki: p.Ki, Kd: p.Kd, Initial: p.Initial,
		StartGrowth: p.StartGrowth, StartExit: p.StartExit, StartBackoff: p.StartBackoff, RearmGrowth: p.RearmGrowth,
		MeanHorizon: p.MeanHorizon, MeanBand: p.MeanBand, IdleFloor: p.IdleFloor,
	}
}

// Step is the profile's control period.
func (p Profile) Step() time.Duration { return msDuration(p.StepMs) }

// Settle is the profile's settling time after the copy's first byte.
func (p Profile) Settle() time.Duration { return msDuration(p.SettleMs) }

// Changes lists the fields in which p differs from its base profile, as
// "field=value" with nested fields dotted ("catch_up.boost=2"), in field
// order; none for a built-in profile.
func (p Profile) Changes() []string {
	base, err := ProfileNamed(p.Name)
	if err != nil {
		return nil
	}
	pf, bf := flatten(p), flatten(base)
	var out []string
	for i, kv := range pf {
		if i < len(bf) && bf[i] != kv {
			out = append(out, kv[0]+"="+kv[1])
		}
	}
	return out
}

// flatten lists p's fields as (dotted name, value) in field order, as a
// profile file names them.
func flatten(p Profile) [][2]string {
	var n yaml.Node
	if err := n.Encode(p); err != nil || n.Kind != yaml.MappingNode {
		return nil
	}
	var out [][2]string
	var walk func(prefix string, m *yaml.Node)
	walk = func(prefix string, m *yaml.Node) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := prefix+m.Content[i].Value, m.Content[i+1]
			if v.Kind == yaml.MappingNode {
				walk(k+".", v)
			} else if k != "name" {
				out = append(out, [2]string{k, v.Value})
			}
		}
	}
	walk("", &n)
	return out
}

// Label is the profile's name with its changes, such as "sluice" or
// "sluice(ki=0.1)".
func (p Profile) Label() string {
	ch := p.Changes()
	if len(ch) == 0 {
		return p.Name
	}
	return p.Name + "(" + strings.Join(ch, ",") + ")"
}

// msDuration converts ms to a duration.
func msDuration(ms float64) time.Duration {
	return time.Duration(math.Round(ms * float64(time.Millisecond)))
}
