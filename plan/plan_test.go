package plan

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/keyspace"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestPlan runs the datadriven transcripts in testdata/. Commands:
//
//	inventory       one agent per input line: "NAME [contract=MS] [TENANT:MB …]"
//	keyspace holder=A  the input is a keyspace's JSON (keyspace.Decode), held by agent A
//	validate        the input is a plan (JSON or YAML): its moves, order, stores, or the error
//	step            one event per input line: "<offset> <kind> [move=N] [id=X] [bytes=N] [err=X]"
//	shares rate=R   each running move's share of R
//	controller [max_rate=R]  the plan's controller (plan.Controller on the default profile)
//	observe [settle=D]  one step per input line: "<offset> STORE=MEAN_MS[/COUNT] …" or "<offset> proxy-down";
//	                prints the signals the controller sees and its rate
//
// Every step round-trips the plan through JSON, as the agent persists it.
func TestPlan(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		inv := Inventory{}
		var p Plan
		var ctrl control.Controller
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "inventory":
				inv = parseInventory(t, d.Input)
				return ""
			case "keyspace":
				var holder string
				d.ScanArgs(t, "holder", &holder)
				ks, err := keyspace.Decode([]byte(d.Input))
				if err != nil {
					t.Fatal(err)
				}
				a := inv[holder]
				a.Keyspaces = append(a.Keyspaces, ks)
				inv[holder] = a
				return ""
			case "validate":
				s, err := Parse([]byte(d.Input))
				if err == nil {
					p, err = Validate(s, inv)
				}
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				return describe(p)
			case "step":
				var out strings.Builder
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					at, ev := parseEvent(t, line)
					var acts []Action
					p, acts = Step(p, ev, at)
					p = roundTrip(t, p)
					fmt.Fprintf(&out, "%s\n", line)
					for _, a := range acts {
						fmt.Fprintf(&out, "  → %s %d (%s)\n", a.Kind, a.Move, p.Moves[a.Move].What())
					}
					out.WriteString("  " + statusLine(p) + "\n")
				}
				return out.String()
			case "controller":
				var err error
				ctrl, err = Controller(p, control.DefaultProfile())
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				return fmt.Sprintf("%s, initial %.0f B/s, reference contract %v\n", ctrl.Name(), ctrl.Initial(), RefContract(p))
			case "observe":
				var settle time.Duration
				if d.HasArg("settle") {
					var v string
					d.ScanArgs(t, "settle", &v)
					settle, _ = time.ParseDuration(v)
				}
				var out strings.Builder
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					at, ws, err := parseWindows(t, line)
					obs := Observe(p, ws, err, at, settle)
					dec := ctrl.Next(obs)
					var sigs []string
					for _, s := range obs.Signals {
						if s.Err != nil && !obs.Settling {
							sigs = append(sigs, s.Name+"=err")
							continue
						}
						if s.Idle {
							sigs = append(sigs, s.Name+"=idle")
							continue
						}
						sigs = append(sigs, fmt.Sprintf("%s=%.1f/%v", s.Name, float64(s.Mean)/1e6, s.Contract))
					}
					w, l, c := Worst(p, ws)
					fmt.Fprintf(&out, "%s\n  signals %s; worst %s %.1f/%gms; rate %.2f MB/s hold=%v\n", line, strings.Join(sigs, " "), w, l, c, dec.Rate/1e6, dec.Hold)
				}
				return out.String()
			case "shares":
				var rate float64
				d.ScanArgs(t, "rate", &rate)
				sh := Shares(p, rate, func(int) bool { return true })
				var out strings.Builder
				for i := range p.Moves {
					if r, ok := sh[i]; ok {
						fmt.Fprintf(&out, "%s %.0f\n", p.Moves[i].Tenant, r)
					}
				}
				return out.String()
			}
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		})
	})
}

func parseInventory(t *testing.T, in string) Inventory {
	inv := Inventory{}
	id := int64(0)
	for _, line := range strings.Split(strings.TrimSpace(in), "\n") {
		f := strings.Fields(line)
		a := Agent{}
		for _, w := range f[1:] {
			if v, ok := strings.CutPrefix(w, "contract="); ok {
				a.ContractMs, _ = strconv.ParseFloat(v, 64)
				continue
			}
			name, mb, _ := strings.Cut(w, ":")
			n, err := strconv.ParseInt(mb, 10, 64)
			if err != nil {
				t.Fatalf("inventory %q: %v", w, err)
			}
			id++
			a.Tenants = append(a.Tenants, Tenant{ID: id, Name: name, Bytes: n << 20})
		}
		inv[f[0]] = a
	}
	return inv
}

func describe(p Plan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "method %s, sub-move %d MiB, state %s\n", p.Method, p.SubMoveBytes>>20, p.State)
	for i, m := range p.Moves {
		if m.IsRange() {
			fmt.Fprintf(&b, "move %d: %s %s(%s)→%s(%s) on %s→%s, held by %s\n", i, m.What(), m.Source, m.SourceTenant, m.Dest, m.DestTenant, m.From, m.To, m.Holder)
			continue
		}
		fmt.Fprintf(&b, "move %d: %s (id %d) %s→%s %d MiB (%d sub-moves)\n", i, m.Tenant, m.TenantID, m.From, m.To, m.Bytes>>20, m.SubMoves(p.SubMoveBytes))
	}
	fmt.Fprintf(&b, "order %v\n", p.Order)
	for _, s := range p.Stores {
		mv := ""
		if s.Moving {
			mv = " moving"
		}
		fmt.Fprintf(&b, "store %s@%s contract %gms%s\n", s.Name, s.Agent, s.ContractMs, mv)
	}
	return b.String()
}

func statusLine(p Plan) string {
	parts := []string{string(p.State)}
	for _, m := range p.Moves {
		s := fmt.Sprintf("%s:%s", m.What(), m.Status)
		if m.Moved > 0 {
			s += fmt.Sprintf("(%dMiB)", m.Moved>>20)
		}
		parts = append(parts, s)
	}
	t := Sum(p)
	return strings.Join(parts, " ") + fmt.Sprintf("  [moved %d/%d MiB]", t.Moved>>20, t.Bytes>>20)
}

func parseEvent(t *testing.T, line string) (time.Time, Event) {
	f := strings.Fields(line)
	if len(f) < 2 {
		t.Fatalf("event %q: want <offset> <kind> …", line)
	}
	off, err := time.ParseDuration(f[0])
	if err != nil {
		t.Fatalf("event %q: %v", line, err)
	}
	ev := Event{Kind: EventKind(f[1])}
	for _, kv := range f[2:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "move":
			ev.Move, _ = strconv.Atoi(v)
		case "id":
			ev.ID = v
		case "bytes":
			n, _ := strconv.ParseInt(strings.TrimSuffix(v, "MiB"), 10, 64)
			ev.Bytes = n << 20
		case "err":
			ev.Err = v
		default:
			t.Fatalf("event %q: unknown argument %q", line, k)
		}
	}
	return t0.Add(off), ev
}

func roundTrip(t *testing.T, p Plan) Plan {
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var q Plan
	if err := json.Unmarshal(b, &q); err != nil {
		t.Fatal(err)
	}
	return q
}

func parseWindows(t *testing.T, line string) (time.Time, []Window, error) {
	f := strings.Fields(line)
	off, err := time.ParseDuration(f[0])
	if err != nil {
		t.Fatalf("observe %q: %v", line, err)
	}
	var ws []Window
	for _, kv := range f[1:] {
		if kv == "proxy-down" {
			return t0.Add(off), nil, fmt.Errorf("proxy unreachable")
		}
		name, v, _ := strings.Cut(kv, "=")
		if v == "idle" {
			ws = append(ws, Window{Store: name, Idle: true})
			continue
		}
		ms, cnt, ok := strings.Cut(v, "/")
		w := Window{Store: name, Count: 100}
		w.MeanMs, _ = strconv.ParseFloat(ms, 64)
		if ok {
			w.Count, _ = strconv.Atoi(cnt)
		}
		ws = append(ws, w)
	}
	return t0.Add(off), ws, nil
}
