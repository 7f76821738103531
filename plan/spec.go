package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluicedb/sluice/keyspace"
)

// Methods: how a plan's moves are paced.
const (
	// MethodIntegral: Aqueduct's integral controller on the worst store's
	// error against P·LC_i (control.Integral). The default.
	MethodIntegral = "integral"
	// MethodPID: Slacker's PID (velocity form) on the worst store's
	// latency against its contract (control.PID).
	MethodPID = "pid"
	// MethodSubStore: sub-moves at the control profile's top speed, no
	// control loop (Aqueduct's Sub-store baseline).
	MethodSubStore = "sub-store"
	// MethodWholeStore: whole moves as fast as they go, unthrottled
	// (Aqueduct's Whole-store baseline: what a hand-run script does).
	MethodWholeStore = "whole-store"
)

// Methods lists the methods in the order documentation gives them.
var Methods = []string{MethodIntegral, MethodPID, MethodSubStore, MethodWholeStore}

// Controlled reports whether method runs a control loop on latency.
func Controlled(method string) bool { return method == MethodIntegral || method == MethodPID }

// DefaultSubMoveBytes is a sub-move's size, bytes: Aqueduct's 32 MB, "a
// reasonable compromise between management overheads and control finesse".
const DefaultSubMoveBytes = 32 << 20

// DefaultContractMs is a store's latency contract, ms, when neither the
// plan nor its server's agent names one: Aqueduct's 10 ms.
const DefaultContractMs = 10

// Spec is a plan as the operator writes it.
type Spec struct {
	// Moves are the tenant and key-range moves, at least one.
	Moves []MoveSpec `json:"moves" yaml:"moves"`
	// ContractsMs are latency contracts by tenant name, ms, > 0; a store
	// without one gets its server's default (Inventory).
	ContractsMs map[string]float64 `json:"contracts_ms,omitempty" yaml:"contracts_ms,omitempty"`
	// SubMoveBytes is the sub-move size, bytes, 1 MiB to 1 GiB; 0 =
	// DefaultSubMoveBytes.
	SubMoveBytes int64 `json:"sub_move_bytes,omitempty" yaml:"sub_move_bytes,omitempty"`
	// Method is one of Methods; "" = MethodIntegral.
	Method string `json:"method,omitempty" yaml:"method,omitempty"`
	// K is the integral controller's gain, (bytes/s) per second of error;
	// 0 = a first guess (control.HeuristicIntegralK) until `sluice tune
	// --live` gives a measured one.
	K float64 `json:"k,omitempty" yaml:"k,omitempty"`
	// MaxRate is the plan's top aggregate rate, bytes/s; 0 = the control
	// profile's.
	MaxRate float64 `json:"max_rate,omitempty" yaml:"max_rate,omitempty"`
}

// MoveSpec is one move: a tenant (its name, or its numeric ID) to agent
// To; or, with Keyspace, the keys Range ("[lo,hi)") of root table Table
// (optional when the keyspace has one) to partition To. From, when given,
// must be where the tenant is (the partition that owns the keys).
type MoveSpec struct {
	Tenant   string `json:"tenant,omitempty" yaml:"tenant,omitempty"`
	Keyspace string `json:"keyspace,omitempty" yaml:"keyspace,omitempty"`
	Table    string `json:"table,omitempty" yaml:"table,omitempty"`
	Range    string `json:"range,omitempty" yaml:"range,omitempty"`
	From     string `json:"from,omitempty" yaml:"from,omitempty"`
	To       string `json:"to" yaml:"to"`
}

// Parse reads a Spec from JSON or YAML (JSON is YAML; a document starting
// with '{' is read as strict JSON). Unknown fields are errors.
func Parse(b []byte) (Spec, error) {
	var s Spec
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return s, errors.New("plan: empty plan")
	}
	if t[0] == '{' {
		d := json.NewDecoder(bytes.NewReader(t))
		d.DisallowUnknownFields()
		if err := d.Decode(&s); err != nil {
			return s, fmt.Errorf("plan: %w", err)
		}
		return s, nil
	}
	d := yaml.NewDecoder(bytes.NewReader(t))
	d.KnownFields(true)
	if err := d.Decode(&s); err != nil {
		return s, fmt.Errorf("plan: %s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return s, nil
}

// Inventory is what Validate checks a Spec against: every agent the driver
// may use, by name.
type Inventory map[string]Agent

// Agent is one agent's part of an Inventory.
type Agent struct {
	// ContractMs is the operator's default contract for this server's
	// tenants, ms; 0 = DefaultContractMs.
	ContractMs float64
	Tenants    []Tenant
	// Keyspaces are the keyspaces this agent holds (drives the
	// reconfigurations of), validated. Their partitions are tenants of
	// the inventory's agents, found by name.
	Keyspaces []*keyspace.Keyspace
}

// Tenant is a tenant where it lives now.
type Tenant struct {
	ID    int64
	Name  string
	Bytes int64 // size estimate, bytes; 0 unknown
	// Busy, when set, says why the tenant cannot move now (e.g. "is
	// migrating-out"); "" = it can.
	Busy string
}

// find returns where tenant ref (a name, or a numeric ID) lives.
func (inv Inventory) find(ref string) (agent string, t Tenant, ok bool) {
	id, idErr := strconv.ParseInt(ref, 10, 64)
	for _, name := range slices.Sorted(maps.Keys(inv)) {
		for _, tn := range inv[name].Tenants {
			if tn.Name == ref || (idErr == nil && tn.ID == id) {
				return name, tn, true
			}
		}
	}
	return "", Tenant{}, false
}

// keyspace returns keyspace name and the agent holding it.
func (inv Inventory) keyspace(name string) (holder string, ks *keyspace.Keyspace, ok bool) {
	for _, a := range slices.Sorted(maps.Keys(inv)) {
		for _, k := range inv[a].Keyspaces {
			if k.Name == name {
				return a, k, true
			}
		}
	}
	return "", nil, false
}

func (inv Inventory) agentErr(i int, name string) error {
	return fmt.Errorf("plan: move %d: unknown agent %q (known: %s)", i+1, name, strings.Join(slices.Sorted(maps.Keys(inv)), ", "))
}

// Validate checks s against inv and returns the plan it describes, every
// move pending. It is the one place a plan is checked: the driver and the
// CLI trust a Plan it returned. Errors are one line naming the move
// (1-based) or the field.
func Validate(s Spec, inv Inventory) (Plan, error) {
	p := Plan{Method: s.Method, SubMoveBytes: s.SubMoveBytes, K: s.K, MaxRate: s.MaxRate, State: StateRunning}
	if p.Method == "" {
		p.Method = MethodIntegral
	}
	if !slices.Contains(Methods, p.Method) {
		return Plan{}, fmt.Errorf("plan: unknown method %q (want %s)", p.Method, strings.Join(Methods, ", "))
	}
	if p.SubMoveBytes == 0 {
		p.SubMoveBytes = DefaultSubMoveBytes
	}
	if p.SubMoveBytes < 1<<20 || p.SubMoveBytes > 1<<30 {
		return Plan{}, fmt.Errorf("plan: sub_move_bytes %d: want 1 MiB to 1 GiB", p.SubMoveBytes)
	}
	if bad(s.K) || s.K < 0 || bad(s.MaxRate) || s.MaxRate < 0 {
		return Plan{}, errors.New("plan: k and max_rate must be finite and >= 0")
	}
	if s.K > 0 && p.Method != MethodIntegral {
		return Plan{}, fmt.Errorf("plan: k is the integral controller's gain; method %s has none", p.Method)
	}
	if len(s.Moves) == 0 {
		return Plan{}, errors.New("plan: no moves")
	}
	seen := map[string]int{}
	kss := map[string]*keyspace.Keyspace{} // each keyspace as the plan's earlier moves leave it
	for i, m := range s.Moves {
		if m.Keyspace != "" {
			mv, err := rangeMove(i, m, inv, kss)
			if err != nil {
				return Plan{}, err
			}
			p.Moves = append(p.Moves, mv)
			continue
		}
		if m.Tenant == "" || m.To == "" {
			return Plan{}, fmt.Errorf("plan: move %d: tenant and to are required (or keyspace, range and to)", i+1)
		}
		if m.Table != "" || m.Range != "" {
			return Plan{}, fmt.Errorf("plan: move %d: table and range are a key-range move's: give its keyspace", i+1)
		}
		if _, ok := inv[m.To]; !ok {
			return Plan{}, inv.agentErr(i, m.To)
		}
		if _, ok := inv[m.From]; m.From != "" && !ok {
			return Plan{}, inv.agentErr(i, m.From)
		}
		from, tn, ok := inv.find(m.Tenant)
		if !ok {
			return Plan{}, fmt.Errorf("plan: move %d: unknown tenant %q", i+1, m.Tenant)
		}
		if m.From != "" && m.From != from {
			return Plan{}, fmt.Errorf("plan: move %d: tenant %s is on agent %s, not %s", i+1, tn.Name, from, m.From)
		}
		if tn.Busy != "" {
			return Plan{}, fmt.Errorf("plan: move %d: tenant %s %s", i+1, tn.Name, tn.Busy)
		}
		if m.To == from {
			return Plan{}, fmt.Errorf("plan: move %d: tenant %s: target %s is its source", i+1, tn.Name, from)
		}
		if j, dup := seen[tn.Name]; dup {
			return Plan{}, fmt.Errorf("plan: tenant %s is in moves %d and %d", tn.Name, j+1, i+1)
		}
		seen[tn.Name] = i
		p.Moves = append(p.Moves, Move{Tenant: tn.Name, TenantID: tn.ID, From: from, To: m.To, Bytes: tn.Bytes, Status: Pending})
	}
	if err := partitionsStay(p.Moves, inv); err != nil {
		return Plan{}, err
	}
	stores, err := storesOf(p.Moves, s.ContractsMs, inv)
	if err != nil {
		return Plan{}, err
	}
	p.Stores = stores
	p.Order = Order(p.Moves)
	return p, nil
}

// storesOf lists every tenant of every server the moves touch, with its
// contract, in (agent, name) order.
func storesOf(moves []Move, contracts map[string]float64, inv Inventory) ([]Store, error) {
	known := map[string]bool{}
	for _, a := range inv {
		for _, t := range a.Tenants {
			known[t.Name] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(contracts)) {
		if !known[name] {
			return nil, fmt.Errorf("plan: contracts_ms: unknown tenant %q", name)
		}
		if v := contracts[name]; bad(v) || v <= 0 {
			return nil, fmt.Errorf("plan: contracts_ms: tenant %s: want a contract > 0 ms, got %v", name, v)
		}
	}
	touched, moving := map[string]bool{}, map[string]bool{}
	for _, m := range moves {
		touched[m.From], touched[m.To] = true, true
		if m.IsRange() {
			moving[m.SourceTenant], moving[m.DestTenant] = true, true
		} else {
			moving[m.Tenant] = true
		}
	}
	var out []Store
	for _, agent := range slices.Sorted(maps.Keys(touched)) {
		a := inv[agent]
		def := a.ContractMs
		if def <= 0 {
			def = DefaultContractMs
		}
		ts := slices.Clone(a.Tenants)
		slices.SortFunc(ts, func(x, y Tenant) int { return strings.Compare(x.Name, y.Name) })
		for _, t := range ts {
			lc := contracts[t.Name]
			if lc == 0 {
				lc = def
			}
			out = append(out, Store{Name: t.Name, Agent: agent, ContractMs: lc, Moving: moving[t.Name]})
		}
	}
	return out, nil
}

func bad(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }
