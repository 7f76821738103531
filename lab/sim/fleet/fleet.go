package fleet

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/lab/sim"
	"github.com/sluicedb/sluice/plan/rebalance"
)

// Config sizes and seeds a fleet. The zero value of a field picks its
// default.
type Config struct {
	Servers int    // default 1,000
	Tenants int    // default 10,000
	Seed    uint64 // every draw of the fleet and the run derives from it
	// Target is the planner's load target, a fraction of a server's
	// capacity in (0, 1]. Default DefaultTarget.
	Target float64
	// P is the integral's reference fraction of each contract, in (0, 1]:
	// it steers every store to P·LC. Default the product's
	// (control.DefaultIntegralParams, 0.9).
	P float64
	// Pole is the closed-loop pole each server's K is tuned for, in
	// (−1, 1). Default lab/sim's DefaultPole (0.7).
	Pole float64
}

// Fleet tunables: the shape of the generated fleet and the executor's
// settings. Units in each comment.
const (
	DefaultServers = 1000
	DefaultTenants = 10000
	DefaultTarget  = 0.55 // planner's load target: servers above carry more than 55 % of their capacity

	MeanLoad      = 0.45 // mean server load at placement, fraction of capacity
	PlaceCeiling  = 0.05 // a tenant is placed only where the server's peak load stays this far under its contract's limit ρ_max
	MaxTenantLoad = 0.25 // cap on one tenant's load, fraction of a server
	LoadAlpha     = 1.2  // bounded-Pareto exponent of tenant loads (weights 1..LoadSpread)
	LoadSpread    = 40.0 // largest/smallest tenant load weight
	SizeAlpha     = 1.2  // bounded-Pareto exponent of tenant sizes, MinSize..MaxSize
	MinSize       = 1 << 30
	MaxSize       = 256 << 30

	MinL0      = 1 * time.Millisecond // a store's latency on an idle server, uniform in [MinL0, MaxL0]
	MaxL0      = 5 * time.Millisecond
	MinStretch = 5.0 // a store's contract LC = stretch × its idle-server latency, stretch uniform in [MinStretch, MaxStretch]
	MaxStretch = 10.0

	MinBandwidth = 80e6  // a server's disk bandwidth (migration bytes/s that would fill it), uniform in [Min, Max]
	MaxBandwidth = 120e6 //

	WaveAmplitude = 0.08     // load wave: ±8 % of the server's load
	WavePeriod    = 900.0    // seconds
	DriftCoef     = 0.95     // AR(1) coefficient of the load's drift, per second
	DriftSigma    = 0.01     // AR(1) innovation, fraction of the load per second
	Noise         = 0.03     // relative noise of a store's 1 s window mean latency (the simulator's 3 %)
	Window        = 3        // seconds of windows the controller is shown (the proxy's 3 s)
	SubMove       = 32 << 20 // sub-move size, bytes (Aqueduct's 32 MB)
	MaxRate       = 50e6     // a move's top speed, bytes/s (the operator's cap on every move)
	MaxSteps      = 6 * 3600 // a run is abandoned after 6 h of virtual time

	Saturation = 0.98           // utilisation at which the fluid queue is taken as saturated
	driftMax   = 6 * DriftSigma // the drift's bound used for placement margins (≈ 6σ of the innovation)
	peakFactor = 1 + WaveAmplitude + 2*driftMax
)

// Store is one tenant as the fleet model sees it.
type Store struct {
	ID       string
	Server   int     // index into Fleet.Servers at the start
	Bytes    int64   // size: what moving it copies
	Load     float64 // share of a server's capacity at the wave's mean
	L0       float64 // latency on an idle server, seconds
	Contract float64 // LC, seconds
}

// Server is one server: its disk and the phase of its load wave.
type Server struct {
	ID        string
	Bandwidth float64 // bytes/s of migration I/O that would fill the disk
	Phase     float64 // radians
}

// Fleet is a generated fleet: servers and stores, before any move.
type Fleet struct {
	Config  Config
	Servers []Server
	Stores  []Store
}

func (c Config) resolve() (Config, error) {
	if c.Servers == 0 {
		c.Servers = DefaultServers
	}
	if c.Tenants == 0 {
		c.Tenants = DefaultTenants
	}
	if c.Target == 0 {
		c.Target = DefaultTarget
	}
	if c.P == 0 {
		c.P = control.DefaultIntegralParams().P
	}
	if c.Pole == 0 {
		c.Pole = sim.DefaultPole
	}
	switch {
	case c.Servers < 2 || c.Servers > 100000:
		return c, fmt.Errorf("fleet: servers must be in [2, 100000], got %d", c.Servers)
	case c.Tenants < 1 || c.Tenants > 1000000:
		return c, fmt.Errorf("fleet: tenants must be in [1, 1000000], got %d", c.Tenants)
	case !(c.Target > 0 && c.Target <= 1):
		return c, fmt.Errorf("fleet: target must be in (0, 1], got %v", c.Target)
	case !(c.P > 0 && c.P <= 1):
		return c, fmt.Errorf("fleet: P must be in (0, 1], got %v", c.P)
	case !(c.Pole > -1 && c.Pole < 1):
		return c, fmt.Errorf("fleet: pole must be in (-1, 1), got %v", c.Pole)
	}
	return c, nil
}

// Generate draws a fleet from c: servers with their disks and load waves,
// tenants of skewed sizes and loads placed at random wherever their
// contracts hold with no migration at the load's peak.
func Generate(c Config) (*Fleet, error) {
	c, err := c.resolve()
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0xf1ee7))
	f := &Fleet{Config: c}
	for i := range c.Servers {
		f.Servers = append(f.Servers, Server{
			ID:        fmt.Sprintf("srv%04d", i),
			Bandwidth: MinBandwidth + (MaxBandwidth-MinBandwidth)*rng.Float64(),
			Phase:     2 * math.Pi * rng.Float64(),
		})
	}
	// Loads: bounded-Pareto weights scaled to MeanLoad per server.
	w := make([]float64, c.Tenants)
	var sum float64
	for i := range w {
		w[i] = boundedPareto(rng, LoadAlpha, 1, LoadSpread)
		sum += w[i]
	}
	scale := MeanLoad * float64(c.Servers) / sum
	load := make([]float64, c.Servers)
	minStretch := make([]float64, c.Servers)
	for i := range minStretch {
		minStretch[i] = math.Inf(1)
	}
	for j := range c.Tenants {
		st := Store{
			ID:    fmt.Sprintf("t%05d", j),
			Bytes: int64(boundedPareto(rng, SizeAlpha, MinSize, MaxSize)),
			Load:  math.Min(w[j]*scale, MaxTenantLoad),
			L0:    (MinL0 + time.Duration(rng.Float64()*float64(MaxL0-MinL0))).Seconds(),
		}
		stretch := MinStretch + (MaxStretch-MinStretch)*rng.Float64()
		st.Contract = stretch * st.L0
		st.Server = -1
		for range 64 { // random servers until one can carry it
			s := rng.IntN(c.Servers)
			ms := math.Min(minStretch[s], stretch)
			if (load[s]+st.Load)*peakFactor <= 1-1/ms-PlaceCeiling {
				st.Server = s
				load[s] += st.Load
				minStretch[s] = ms
				break
			}
		}
		if st.Server < 0 {
			return nil, fmt.Errorf("fleet: tenant %s (load %.3f) fits no server: fewer tenants or more servers", st.ID, st.Load)
		}
		f.Stores = append(f.Stores, st)
	}
	return f, nil
}

// boundedPareto draws from a Pareto law of exponent alpha cut to [lo, hi]
// (inverse transform): Zipf-like, most draws near lo, a few near hi.
func boundedPareto(rng *rand.Rand, alpha, lo, hi float64) float64 {
	u := rng.Float64()
	la, ha := math.Pow(lo, alpha), math.Pow(hi, alpha)
	return math.Pow(-(u*ha-u*la-ha)/(ha*la), -1/alpha)
}

// Plan asks the rebalancing planner for the moves that bring every server
// under the fleet's target.
func (f *Fleet) Plan() (rebalance.Result, error) {
	servers := make([]rebalance.Server, len(f.Servers))
	for i, s := range f.Servers {
		servers[i] = rebalance.Server{ID: s.ID}
	}
	tenants := make([]rebalance.Tenant, len(f.Stores))
	for j, st := range f.Stores {
		tenants[j] = rebalance.Tenant{ID: st.ID, Server: f.Servers[st.Server].ID, Bytes: st.Bytes, Load: st.Load}
	}
	return rebalance.Plan(servers, tenants, rebalance.Params{Target: f.Config.Target})
}
