package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"
)

// Store is one tenant (a database, Aqueduct's "store") served by the
// simulated server, with its own open-loop workload and latency contract.
type Store struct {
	Name string
	// Rate is the mean arrival rate at load multiplier 1, transactions/s.
	Rate float64
	// Work is the mean service demand of one transaction: its latency when it
	// runs alone on an otherwise idle server.
	Work time.Duration
	// WorkCV is the coefficient of variation (stddev/mean) of the lognormal
	// service demand; YCSB's 10-operation transactions mix cache hits and
	// disk reads, which gives roughly 0.5–1.
	WorkCV float64
	// MPL is the number of client threads (Slacker's multiprogramming level):
	// at most MPL transactions of this store run at once, the rest wait in a
	// FIFO queue, and their latency includes the wait.
	MPL int
	// Contract is the store's latency contract LC_i (mean over a 1 s window).
	// 0 means the run's contract (Options.Contract, else the setpoint).
	Contract time.Duration
	// Exposure is the share of the migration's capacity use this store's
	// transactions feel, in (0, 1]. The migrating store feels all of it
	// (its files are the ones being read, its cache is the one being
	// polluted); neighbours on the same disk feel part of it.
	Exposure float64
	// Migrating marks the store being moved (informational: for plots and
	// reports).
	Migrating bool
}

// Plant is the server and the migration.
type Plant struct {
	// Parallelism C is how many transactions the server runs at full speed
	// at once (disk queue depth × CPUs, in effect). With n > C running they
	// share it: each progresses at C/n of full speed (processor sharing).
	Parallelism float64
	// Capacity is the migration read rate that would take the whole server,
	// bytes/s. A migration reading at r uses the share u = r/Capacity, and
	// every transaction of a store with exposure e runs at (1 − e·u) of its
	// speed.
	Capacity float64
	// MaxRate is the fastest the migration can go when unthrottled, bytes/s:
	// the cap of every controller's output.
	MaxRate float64
	// Size is the amount of data to move, bytes.
	Size int64
	// Buffer is the read-ahead memory cap for prefetching controllers
	// (Interference), bytes.
	Buffer int64
	// IOTime is the disk time of one foreground page I/O. The workload's
	// offered I/O keeps the disk busy U_fg(t) = Σ_i rate_i(t)·OpsPerTxn·IOTime
	// of the time, and every transaction runs at (1 − e_i·u − U_fg) of its
	// speed: each of its I/Os waits behind the migration's and the other
	// transactions' (a mean-field disk; the arrivals' own randomness still
	// shows in the queue and the demands).
	IOTime time.Duration
	// OpsPerTxn and OpBytes turn transactions into block I/O: each
	// transaction issues OpsPerTxn I/Os of OpBytes (for U_fg and the HostIO
	// figures). MigIOBytes is the size of one migration read.
	OpsPerTxn  float64
	OpBytes    float64
	MigIOBytes float64
}

// Load is the workload's intensity over time: a multiplier on every store's
// Rate. Times are seconds since the migration starts (negative during the
// warm-up).
type Load interface {
	// At returns the multiplier at time t, in [0, Max()].
	At(t float64) float64
	// Max is an upper bound of At over all t (used for thinning).
	Max() float64
}

// Scenario is a named workload on a named plant.
type Scenario struct {
	Name        string
	Description string
	Plant       Plant
	Stores      []Store
	// NewLoad builds the scenario's load shape. Random shapes (bursts) draw
	// from rng, so a seed fixes them; the idle twin of a run gets the same
	// shape.
	NewLoad func(rng *rand.Rand) Load
	// Setpoint is the default latency setpoint of the scenario.
	Setpoint time.Duration
}

// Validate reports the first inconsistent field of s.
func (s Scenario) Validate() error {
	p := s.Plant
	switch {
	case s.Name == "":
		return fmt.Errorf("sim: scenario has no name")
	case len(s.Stores) == 0:
		return fmt.Errorf("sim: scenario %s: no stores", s.Name)
	case !(p.Parallelism > 0):
		return fmt.Errorf("sim: scenario %s: parallelism must be > 0", s.Name)
	case !(p.Capacity > 0) || math.IsInf(p.Capacity, 0):
		return fmt.Errorf("sim: scenario %s: capacity must be > 0 bytes/s", s.Name)
	case !(p.MaxRate > 0) || math.IsInf(p.MaxRate, 0):
		return fmt.Errorf("sim: scenario %s: max rate must be > 0 bytes/s", s.Name)
	case p.Size <= 0:
		return fmt.Errorf("sim: scenario %s: size must be > 0 bytes", s.Name)
	case p.IOTime < 0 || p.OpsPerTxn < 0:
		return fmt.Errorf("sim: scenario %s: IO time and ops per transaction must be >= 0", s.Name)
	case p.Buffer < 0:
		return fmt.Errorf("sim: scenario %s: buffer must be >= 0 bytes", s.Name)
	case s.NewLoad == nil:
		return fmt.Errorf("sim: scenario %s: no load shape", s.Name)
	case s.Setpoint <= 0:
		return fmt.Errorf("sim: scenario %s: setpoint must be > 0", s.Name)
	}
	for _, st := range s.Stores {
		switch {
		case !(st.Rate >= 0) || math.IsInf(st.Rate, 0):
			return fmt.Errorf("sim: scenario %s: store %s: rate must be >= 0", s.Name, st.Name)
		case st.Work <= 0:
			return fmt.Errorf("sim: scenario %s: store %s: work must be > 0", s.Name, st.Name)
		case !(st.WorkCV >= 0):
			return fmt.Errorf("sim: scenario %s: store %s: work CV must be >= 0", s.Name, st.Name)
		case st.MPL <= 0:
			return fmt.Errorf("sim: scenario %s: store %s: MPL must be > 0", s.Name, st.Name)
		case !(st.Exposure > 0 && st.Exposure <= 1):
			return fmt.Errorf("sim: scenario %s: store %s: exposure must be in (0,1]", s.Name, st.Name)
		case st.Contract < 0:
			return fmt.Errorf("sim: scenario %s: store %s: contract must be >= 0", s.Name, st.Name)
		}
	}
	return nil
}

// DefaultPlant is the calibrated server: Slacker's testbed scaled to
// milliseconds (see the package doc for the calibration).
func DefaultPlant() Plant {
	return Plant{
		Parallelism: 32,                    // transactions at full speed at once (CPU cores × disk queue)
		Capacity:    17e6,                  // 17 MB/s of migration reads would take the whole disk
		MaxRate:     12e6,                  // unthrottled migration: 12 MB/s (71% of the disk)
		Size:        1 << 30,               // 1 GiB tenant, as Slacker's YCSB database
		Buffer:      256 << 20,             // 256 MiB read-ahead for prefetching controllers
		IOTime:      80 * time.Microsecond, // disk time per foreground page I/O
		OpsPerTxn:   10,                    // YCSB: 10 operations per transaction
		OpBytes:     8 << 10,               // one 8 KiB page per operation
		MigIOBytes:  128 << 10,             // 128 KiB sequential migration reads
	}
}

// defaultStore is the single tenant of the one-store scenarios: 440 txn/s
// keep the disk 35% busy (440·10·80 µs), so its idle latency is
// 2.6 ms / 0.65 = 4 ms.
func defaultStore() Store {
	return Store{
		Name:      "tenant",
		Rate:      440,                     // transactions/s
		Work:      2600 * time.Microsecond, // service demand alone on an idle disk
		WorkCV:    0.5,                     // lognormal spread of the demand
		MPL:       40,                      // client threads
		Exposure:  1,                       // it is the tenant being moved
		Migrating: true,
	}
}

// constLoad is a constant multiplier.
type constLoad float64

func (c constLoad) At(float64) float64 { return float64(c) }
func (c constLoad) Max() float64       { return float64(c) }

// stepLoad is 1 before At and Factor from then on.
type stepLoad struct{ at, factor float64 }

func (s stepLoad) At(t float64) float64 {
	if t >= s.at {
		return s.factor
	}
	return 1
}
func (s stepLoad) Max() float64 { return math.Max(1, s.factor) }

// onOffLoad alternates between high and low phases whose lengths are drawn
// up front (a sorted list of switch times); each switch ramps linearly over
// ramp seconds, as load does in a real trace.
type onOffLoad struct {
	switches []float64 // times at which the phase starts to flip, ascending
	firstOn  bool      // phase before switches[0]
	high     float64
	low      float64
	ramp     float64 // s
}

func (o onOffLoad) phase(n int) float64 {
	on := o.firstOn
	if n%2 == 1 {
		on = !on
	}
	if on {
		return o.high
	}
	return o.low
}

func (o onOffLoad) At(t float64) float64 {
	n := sort.SearchFloat64s(o.switches, t) // switches before t
	if n == 0 {
		return o.phase(0)
	}
	since := t - o.switches[n-1]
	to, from := o.phase(n), o.phase(n-1)
	if o.ramp > 0 && since < o.ramp {
		return from + (to-from)*since/o.ramp
	}
	return to
}
func (o onOffLoad) Max() float64 { return math.Max(o.high, o.low) }

// sineLoad is a compressed daily wave: 1 + Amp·sin(2π(t−Phase)/Period).
type sineLoad struct{ amp, period, phase float64 }

func (s sineLoad) At(t float64) float64 {
	return 1 + s.amp*math.Sin(2*math.Pi*(t-s.phase)/s.period)
}
func (s sineLoad) Max() float64 { return 1 + math.Abs(s.amp) }

// Scenario tunables. Times are seconds since the migration starts.
const (
	step40At     = 60.0 // s: Slacker Fig. 13a raises the arrival rate after one minute
	step40Factor = 1.4  // +40% arrivals

	burstHigh    = 1.5  // load multiplier while a burst is on
	burstLow     = 0.45 // load multiplier between bursts
	burstOnMean  = 12.0 // s: mean burst length (exponential, plus burstMinLen)
	burstOffMean = 15.0 // s: mean lull length (exponential, plus burstMinLen)
	burstMinLen  = 6.0  // s: shortest burst or lull (ramps included)
	burstRamp    = 5.0  // s: a burst builds up and dies down over this long
	burstHorizon = 3600 // s: bursts are drawn this far ahead

	diurnalAmp    = 0.35  // ±35% around the mean load
	diurnalPeriod = 240.0 // s: one "day", compressed so a migration sees most of it
)

// Scenarios returns the built-in scenarios, in a stable order.
func Scenarios() []Scenario {
	base := DefaultPlant()
	one := []Store{defaultStore()}
	return []Scenario{
		{
			Name:        "steady",
			Description: "one tenant, constant Poisson arrivals (400 txn/s, 50% busy), 1 GiB to move",
			Plant:       base, Stores: one, Setpoint: 30 * time.Millisecond,
			NewLoad: func(*rand.Rand) Load { return constLoad(1) },
		},
		{
			Name:        "step40",
			Description: "steady, then +40% arrivals 60 s into the migration (Slacker Fig. 13a)",
			Plant:       base, Stores: one, Setpoint: 30 * time.Millisecond,
			NewLoad: func(*rand.Rand) Load { return stepLoad{at: step40At, factor: step40Factor} },
		},
		{
			Name: "bursty",
			Description: fmt.Sprintf("on/off bursts like Aqueduct's OpenMail trace: x%.2f for ~%.0f s, x%.2f for ~%.0f s, %.0f s ramps",
				burstHigh, burstOnMean+burstMinLen, burstLow, burstOffMean+burstMinLen, burstRamp),
			Plant: base, Stores: one, Setpoint: 30 * time.Millisecond,
			NewLoad: newBurstLoad,
		},
		{
			Name:        "diurnal",
			Description: fmt.Sprintf("a daily wave compressed to %.0f s: load x(1 ± %.2f)", diurnalPeriod, diurnalAmp),
			Plant:       base, Stores: one, Setpoint: 30 * time.Millisecond,
			NewLoad: func(*rand.Rand) Load { return sineLoad{amp: diurnalAmp, period: diurnalPeriod} },
		},
		{
			Name:        "multitenant",
			Description: "5 stores with their own contracts on one server, store s0 migrating (Aqueduct §5, Slacker Fig. 13b)",
			Plant:       base, Stores: multitenantStores(), Setpoint: 22 * time.Millisecond,
			NewLoad: func(*rand.Rand) Load { return constLoad(1) },
		},
	}
}

// multitenantStores splits the single tenant's load over five stores (the
// total work is the same, as in Slacker §5.6) with contracts of their own.
func multitenantStores() []Store {
	ms := time.Millisecond
	us := time.Microsecond
	return []Store{
		{Name: "s0", Rate: 200, Work: 1600 * us, WorkCV: 0.5, MPL: 40, Contract: 25 * ms, Exposure: 1, Migrating: true},
		{Name: "s1", Rate: 100, Work: 2 * ms, WorkCV: 0.5, MPL: 20, Contract: 15 * ms, Exposure: 0.7},
		{Name: "s2", Rate: 60, Work: 4 * ms, WorkCV: 0.5, MPL: 20, Contract: 40 * ms, Exposure: 0.7},
		{Name: "s3", Rate: 50, Work: 3 * ms, WorkCV: 0.5, MPL: 20, Contract: 30 * ms, Exposure: 0.7},
		{Name: "s4", Rate: 30, Work: 5 * ms, WorkCV: 0.5, MPL: 20, Contract: 50 * ms, Exposure: 0.7},
	}
}

// newBurstLoad draws an on/off schedule: phases alternate, each lasting
// burstMinLen plus an exponential time with the phase's mean.
func newBurstLoad(rng *rand.Rand) Load {
	o := onOffLoad{high: burstHigh, low: burstLow, ramp: burstRamp}
	o.firstOn = false
	// Start somewhere inside a lull before the warm-up so the phase at t=0
	// depends on the seed.
	t := -60.0 - rng.Float64()*burstOffMean
	on := o.firstOn
	for t < burstHorizon {
		mean := burstOffMean
		if on {
			mean = burstOnMean
		}
		t += burstMinLen + rng.ExpFloat64()*mean
		o.switches = append(o.switches, t)
		on = !on
	}
	return o
}

// Lookup returns the built-in scenario called name.
func Lookup(name string) (Scenario, error) {
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, nil
		}
	}
	return Scenario{}, fmt.Errorf("unknown scenario %q (want one of %s)", name, strings.Join(ScenarioNames(), ", "))
}

// ScenarioNames lists the built-in scenarios' names.
func ScenarioNames() []string {
	var n []string
	for _, s := range Scenarios() {
		n = append(n, s.Name)
	}
	return slices.Clip(n)
}
