package rebalance

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

func TestPlan(t *testing.T) {
	srv := func(ids ...string) []Server {
		var s []Server
		for _, id := range ids {
			s = append(s, Server{ID: id})
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		servers []Server
		tenants []Tenant
		target  float64
		want    []Move
		over    []string
	}{
		{
			name:    "balanced: nothing to do",
			servers: srv("a", "b"),
			tenants: []Tenant{{"t1", "a", 10, 0.4}, {"t2", "b", 10, 0.4}},
			target:  0.5,
		},
		{
			name:    "one tenant covers the excess: the smallest such",
			servers: srv("a", "b"),
			tenants: []Tenant{{"big", "a", 900, 0.3}, {"small", "a", 100, 0.2}, {"tiny", "a", 5, 0.05}, {"x", "b", 1, 0.1}},
			target:  0.45, // a at 0.55: excess 0.1, both big and small cover it
			want:    []Move{{"small", "a", "b", 100, 0.2}},
		},
		{
			name:    "no single tenant covers: most load per byte first",
			servers: srv("a", "b", "c"),
			tenants: []Tenant{{"p", "a", 100, 0.2}, {"q", "a", 10, 0.1}, {"r", "a", 400, 0.2}, {"s", "a", 1000, 0.2}},
			target:  0.4, // a at 0.7: excess 0.3
			want:    []Move{{"q", "a", "b", 10, 0.1}, {"p", "a", "c", 100, 0.2}},
		},
		{
			name:    "destinations fill by headroom",
			servers: srv("a", "b", "c"),
			tenants: []Tenant{{"t1", "a", 1, 0.15}, {"t2", "a", 1, 0.15}, {"t3", "a", 1, 0.15}, {"t4", "a", 1, 0.15}, {"u", "b", 1, 0.1}},
			target:  0.3, // a 0.6 → sheds 2; c (room 0.3) first, then b (0.2 > c's 0.15 left)
			want:    []Move{{"t1", "a", "c", 1, 0.15}, {"t2", "a", "b", 1, 0.15}},
		},
		{
			name:    "largest excess first",
			servers: srv("a", "b", "z"),
			tenants: []Tenant{{"a1", "a", 1, 0.6}, {"a2", "a", 1, 0.1}, {"b1", "b", 5, 0.5}, {"b2", "b", 1, 0.3}},
			target:  0.7, // b at 0.8 (excess 0.1) before a at 0.7 (not over)
			want:    []Move{{"b2", "b", "z", 1, 0.3}},
		},
		{
			name:    "no room anywhere: left over",
			servers: srv("a", "b"),
			tenants: []Tenant{{"t", "a", 1, 0.9}, {"u", "b", 1, 0.45}},
			target:  0.5,
			over:    []string{"a"},
		},
		{
			name:    "capacity scales the target",
			servers: []Server{{ID: "a", Capacity: 2}, {ID: "b"}},
			tenants: []Tenant{{"t", "a", 1, 0.9}, {"u", "a", 1, 0.2}},
			target:  0.5, // a can carry 1.0: over by 0.1
			want:    []Move{{"u", "a", "b", 1, 0.2}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Plan(tc.servers, tc.tenants, Params{Target: tc.target})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.Moves, tc.want) {
				t.Fatalf("moves %+v, want %+v", r.Moves, tc.want)
			}
			var over []string
			for _, e := range r.Over {
				over = append(over, e.Server)
			}
			if !reflect.DeepEqual(over, tc.over) {
				t.Fatalf("over %v, want %v", over, tc.over)
			}
		})
	}
}

func TestPlanRefusesBadInput(t *testing.T) {
	ok := []Server{{ID: "a"}, {ID: "b"}}
	for name, tc := range map[string]struct {
		s []Server
		t []Tenant
		p float64
	}{
		"target 0":          {ok, nil, 0},
		"target above 1":    {ok, nil, 1.5},
		"target NaN":        {ok, nil, math.NaN()},
		"server twice":      {[]Server{{ID: "a"}, {ID: "a"}}, nil, 0.5},
		"server without ID": {[]Server{{}}, nil, 0.5},
		"negative capacity": {[]Server{{ID: "a", Capacity: -1}}, nil, 0.5},
		"unknown server":    {ok, []Tenant{{"t", "c", 1, 0.1}}, 0.5},
		"tenant twice":      {ok, []Tenant{{"t", "a", 1, 0.1}, {"t", "b", 1, 0.1}}, 0.5},
		"negative bytes":    {ok, []Tenant{{"t", "a", -1, 0.1}}, 0.5},
		"infinite load":     {ok, []Tenant{{"t", "a", 1, math.Inf(1)}}, 0.5},
	} {
		if _, err := Plan(tc.s, tc.t, Params{Target: tc.p}); !errors.Is(err, ErrInput) {
			t.Errorf("%s: err %v, want ErrInput", name, err)
		}
	}
}

// Property: on random skewed fleets, every move leaves its source, lands on
// a server that stays within the target counting every move to it, moves a
// tenant at most once, never uses a server as both source and destination,
// and every server ends within the target or is reported over; load is
// conserved; the same input gives the same plan.
func TestPlanProperties(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		ns := 2 + rng.IntN(30)
		var servers []Server
		for i := range ns {
			servers = append(servers, Server{ID: fmt.Sprintf("s%02d", i), Capacity: []float64{0, 1, 2}[rng.IntN(3)]})
		}
		var tenants []Tenant
		for j := range rng.IntN(10 * ns) {
			tenants = append(tenants, Tenant{
				ID: fmt.Sprintf("t%03d", j), Server: servers[rng.IntN(ns)].ID,
				Bytes: int64(rng.ExpFloat64() * 1e9), Load: 0.2 * rng.Float64() * rng.Float64(),
			})
		}
		p := Params{Target: 0.2 + 0.8*rng.Float64()}
		r, err := Plan(servers, tenants, p)
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := Plan(servers, tenants, p); !reflect.DeepEqual(r, again) {
			t.Fatalf("seed %d: not deterministic", seed)
		}
		checkPlan(t, seed, servers, tenants, p, r)
	}
}

func checkPlan(t *testing.T, seed uint64, servers []Server, tenants []Tenant, p Params, r Result) {
	t.Helper()
	const eps = 1e-9
	load, limit := map[string]float64{}, map[string]float64{}
	for _, s := range servers {
		c := s.Capacity
		if c == 0 {
			c = 1
		}
		limit[s.ID] = p.Target * c
	}
	where := map[string]string{}
	var total float64
	for _, tn := range tenants {
		load[tn.Server] += tn.Load
		where[tn.ID] = tn.Server
		total += tn.Load
	}
	before := map[string]float64{}
	for k, v := range load {
		before[k] = v
	}
	src, dst := map[string]bool{}, map[string]bool{}
	var bytes int64
	for _, m := range r.Moves {
		if where[m.Tenant] != m.From || m.From == m.To {
			t.Fatalf("seed %d: move %+v: tenant is on %s", seed, m, where[m.Tenant])
		}
		where[m.Tenant] = m.To + "(moved)"
		load[m.From] -= m.Load
		load[m.To] += m.Load
		src[m.From], dst[m.To] = true, true
		bytes += m.Bytes
		if before[m.From] <= limit[m.From]+eps {
			t.Fatalf("seed %d: move %+v off a server within the target", seed, m)
		}
	}
	for s := range src {
		if dst[s] {
			t.Fatalf("seed %d: server %s is both a source and a destination", seed, s)
		}
	}
	over := map[string]bool{}
	for _, e := range r.Over {
		over[e.Server] = true
	}
	var after float64
	for _, s := range servers {
		after += load[s.ID]
		if load[s.ID] > limit[s.ID]+eps && !over[s.ID] {
			t.Fatalf("seed %d: server %s at %.4f over its limit %.4f and not reported", seed, s.ID, load[s.ID], limit[s.ID])
		}
		if dst[s.ID] && load[s.ID] > limit[s.ID]+eps {
			t.Fatalf("seed %d: destination %s overfilled", seed, s.ID)
		}
	}
	if math.Abs(after-total) > 1e-6 || bytes != r.Bytes {
		t.Fatalf("seed %d: load %v → %v, bytes %d vs %d", seed, total, after, bytes, r.Bytes)
	}
}
