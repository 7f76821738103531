package migration

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestStep runs the datadriven transcripts in testdata/step/. Commands:
//
//	new id=m1 tenant=t1 mode=live|stop-and-copy [warm=false] [fence=stop]
//	step             one event per input line: "<offset> <event> [k=v…]"
//	show             the record's JSON
//
// Every step round-trips the record through JSON, as the agent persists it.
func TestStep(t *testing.T) {
	datadriven.Walk(t, "testdata/step", func(t *testing.T, path string) {
		var rec Record
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "new":
				var id, tenant, mode string
				d.ScanArgs(t, "id", &id)
				d.ScanArgs(t, "tenant", &tenant)
				d.ScanArgs(t, "mode", &mode)
				rec = New(id, tenant, "a", "b", Mode(mode), t0)
				if d.HasArg("warm") {
					d.ScanArgs(t, "warm", &rec.Warm)
				}
				if d.HasArg("fence") {
					var f string
					d.ScanArgs(t, "fence", &f)
					rec.Fence = FenceMode(f)
				}
				return summary(rec, nil, false)
			case "step":
				var out strings.Builder
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					at, ev := parseEvent(t, line)
					before := rec
					next, acts := Step(rec, ev, at)
					rec = roundTrip(t, next)
					fmt.Fprintf(&out, "%s\n", line)
					out.WriteString(summary(rec, acts, jsonEq(t, before, rec)))
				}
				return out.String()
			case "show":
				b, err := json.MarshalIndent(rec, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				return string(b) + "\n"
			}
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		})
	})
}

func summary(rec Record, acts []Action, ignored bool) string {
	var b strings.Builder
	if ignored {
		b.WriteString("  (ignored)\n")
		return b.String()
	}
	fmt.Fprintf(&b, "  phase=%s", rec.Phase)
	if rec.Error != "" {
		fmt.Fprintf(&b, " error=%q", rec.Error)
	}
	if rec.Failures > 0 {
		fmt.Fprintf(&b, " failures=%d retry-error=%q", rec.Failures, rec.RetryError)
	}
	if rec.Freeze > 0 {
		fmt.Fprintf(&b, " freeze=%s", rec.Freeze)
	}
	b.WriteString("\n")
	for _, a := range acts {
		fmt.Fprintf(&b, "  -> %s\n", a)
	}
	return b.String()
}

func roundTrip(t *testing.T, r Record) Record {
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var out Record
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return out
}

func jsonEq(t *testing.T, a, b Record) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// parseEvent parses "<offset> <event> [k=v…]"; failed and abort take the rest
// of the line as their text.
func parseEvent(t *testing.T, line string) (time.Time, Event) {
	f := strings.Fields(line)
	if len(f) < 2 {
		t.Fatalf("bad event line %q", line)
	}
	off, err := time.ParseDuration(f[0])
	if err != nil {
		t.Fatalf("bad offset in %q: %v", line, err)
	}
	at := t0.Add(off)
	kv := map[string]string{}
	for _, s := range f[2:] {
		k, v, _ := strings.Cut(s, "=")
		kv[k] = v
	}
	num := func(k string) int64 {
		n, err := strconv.ParseInt(kv[k], 10, 64)
		if err != nil {
			t.Fatalf("bad %s in %q", k, line)
		}
		return n
	}
	lsn := func() LSN {
		l, err := ParseLSN(kv["lsn"])
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	rest := strings.Join(f[2:], " ")
	switch f[1] {
	case "start":
		return at, Start{}
	case "reserved":
		return at, Reserved{Dir: kv["dir"], Port: int(num("port"))}
	case "slot-created":
		return at, SlotCreated{LSN: lsn()}
	case "snapshot-done":
		e := SnapshotDone{Bytes: num("bytes"), StartLSN: lsn(), Checkpoint: kv["checkpoint"]}
		if v, ok := kv["start"]; ok {
			if e.StartSeconds, err = strconv.ParseFloat(v, 64); err != nil {
				t.Fatalf("bad start in %q", line)
			}
		}
		return at, e
	case "standby-started":
		return at, StandbyStarted{}
	case "lag":
		return at, LagReport{Bytes: num("bytes")}
	case "warmed":
		return at, Warmed{Blocks: int(num("blocks")), Bytes: num("bytes")}
	case "held":
		return at, Held{}
	case "flush":
		return at, FlushRead{LSN: lsn()}
	case "fenced":
		return at, Fenced{LSN: lsn()}
	case "copied":
		return at, Copied{Bytes: num("bytes")}
	case "replayed":
		return at, Replayed{LSN: lsn()}
	case "promoted":
		return at, Promoted{}
	case "switched":
		return at, Switched{}
	case "released":
		return at, Released{}
	case "cleaned-up":
		return at, CleanedUp{}
	case "snapshot-reset":
		return at, SnapshotReset{}
	case "rolled-back":
		return at, RolledBack{}
	case "failed":
		return at, Failed{Err: rest}
	case "resumed":
		return at, Resumed{}
	case "abort":
		return at, Abort{Reason: rest}
	}
	t.Fatalf("unknown event in %q", line)
	return at, nil
}

// successOf returns the success event of action a, with plausible values.
func successOf(a Action, rec Record) Event {
	switch a := a.(type) {
	case Reserve:
		return Reserved{Dir: "/srv/" + rec.ID, Port: 6000}
	case CreateSlot:
		return SlotCreated{LSN: 0x1000}
	case StreamSnapshot:
		return SnapshotDone{Bytes: 100, StartLSN: 0x2000}
	case StartStandby:
		return StandbyStarted{}
	case WaitCatchUp:
		return LagReport{Bytes: a.MaxLag}
	case Warm:
		return Warmed{Blocks: 3, Bytes: 3 * 8192}
	case Hold:
		return Held{}
	case ReadFlushLSN:
		return FlushRead{LSN: 0x3000}
	case Fence:
		return Fenced{LSN: 0x3100}
	case CopyCold:
		return Copied{Bytes: 100}
	case WaitReplay:
		return Replayed{LSN: a.LSN}
	case Promote:
		return Promoted{}
	case Switch:
		return Switched{}
	case Release:
		return Released{}
	case Cleanup:
		return CleanedUp{}
	case ResetSnapshot:
		return SnapshotReset{}
	case Rollback:
		return RolledBack{}
	}
	panic(fmt.Sprintf("no success event for %T", a))
}

// TestStepRandomWalk drives many migrations with random failures, crashes
// (Resumed) and aborts, and checks the invariants that make a migration safe:
// nothing rolls back after the route switch; a rollback that may follow a
// hold or fence undoes both; every migration ends done or aborted; done means
// every handover step happened in order.
func TestStepRandomWalk(t *testing.T) {
	rng := rand.New(rand.NewSource(42))
	done, aborted := 0, 0
	for i := 0; i < 3000; i++ {
		mode := Live
		if i%3 == 0 {
			mode = StopAndCopy
		}
		rec := New(fmt.Sprintf("m%d", i), "t", "a", "b", mode, t0)
		rec.Warm = i%2 == 0
		now := t0
		rec, acts := Step(rec, Start{}, now)
		switched := false
		for steps := 0; ; steps++ {
			if steps > 10000 {
				t.Fatalf("migration %d did not end: %+v", i, rec)
			}
			now = now.Add(time.Millisecond)
			if len(acts) == 0 {
				if rec.Phase.Terminal() {
					break
				}
				rec, acts = Step(rec, Resumed{}, now) // stuck: the agent retries later
				continue
			}
			a := acts[0]
			if rb, ok := a.(Rollback); ok {
				if switched {
					t.Fatalf("migration %d: rollback after switch: %+v", i, rec)
				}
				if rec.FailedIn == PhaseHandover && (!rb.Unfence || !rb.Release || !rb.SwitchBack) {
					t.Fatalf("migration %d: rollback from handover without unfence/release: %v", i, rb)
				}
			}
			var ev Event
			switch p := rng.Float64(); {
			case p < 0.04:
				ev = Failed{Err: "injected"}
			case p < 0.07:
				ev = Resumed{}
			case p < 0.08:
				ev = Abort{Reason: "operator"}
			default:
				ev = successOf(a, rec)
			}
			rec, acts = Step(roundTrip(t, rec), ev, now)
			if rec.Switched() {
				switched = true
			}
			if switched && (rec.Phase == PhaseRollback || rec.Phase == PhaseAborted) {
				t.Fatalf("migration %d: phase %s after switch", i, rec.Phase)
			}
		}
		switch rec.Phase {
		case PhaseDone:
			done++
			ts := []time.Time{rec.HeldAt, rec.FencedAt, rec.PromotedAt, rec.SwitchedAt, rec.ReleasedAt, rec.CleanedAt}
			for j := 1; j < len(ts); j++ {
				if ts[j].IsZero() || ts[j].Before(ts[j-1]) {
					t.Fatalf("migration %d done with handover out of order: %+v", i, rec)
				}
			}
			if mode == Live && rec.ReplayLSN < rec.FenceLSN {
				t.Fatalf("migration %d promoted before replaying the fence LSN: %+v", i, rec)
			}
		case PhaseAborted:
			aborted++
			if switched {
				t.Fatalf("migration %d aborted after switch", i)
			}
		}
	}
	if done == 0 || aborted == 0 {
		t.Fatalf("walk too narrow: done=%d aborted=%d", done, aborted)
	}
	t.Logf("done=%d aborted=%d", done, aborted)
}

func TestLSN(t *testing.T) {
	for _, s := range []string{"0/0", "0/16B3748", "1/0", "FFFFFFFF/FFFFFFFF"} {
		l, err := ParseLSN(s)
		if err != nil {
			t.Fatal(err)
		}
		if l.String() != s {
			t.Fatalf("ParseLSN(%q).String() = %q", s, l)
		}
	}
	for _, s := range []string{"", "16B3748", "x/1", "1/100000000"} {
		if _, err := ParseLSN(s); err == nil {
			t.Fatalf("ParseLSN(%q) succeeded", s)
		}
	}
}

func TestSlotName(t *testing.T) {
	for in, want := range map[string]string{"m1": "sluice_m1", "Ab-9.x": "sluice_ab_9_x"} {
		if got := SlotName(in); got != want {
			t.Fatalf("SlotName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestReleasedAt: the freeze ends when the router says it released the held
// transactions, if that time is plausible (after the switch, not after now);
// otherwise when the event arrived.
func TestReleasedAt(t *testing.T) {
	rec := New("m1", "t", "a", "b", Live, t0)
	rec.Phase = PhaseHandover
	rec.HeldAt = t0
	rec.FencedAt, rec.ReplayedAt, rec.PromotedAt = t0.Add(20*time.Millisecond), t0.Add(25*time.Millisecond), t0.Add(60*time.Millisecond)
	rec.SwitchedAt = t0.Add(61 * time.Millisecond)
	rec.FlushLSN, rec.FlushAt = 0x3000000, t0.Add(time.Millisecond)
	if _, ok := Next(rec).(Release); !ok {
		t.Fatalf("next action %v, want release", Next(rec))
	}
	now := t0.Add(190 * time.Millisecond) // the answer came late
	for _, c := range []struct {
		at   time.Time
		want time.Duration
	}{
		{t0.Add(63 * time.Millisecond), 63 * time.Millisecond},
		{time.Time{}, 190 * time.Millisecond},
		{t0.Add(10 * time.Millisecond), 190 * time.Millisecond}, // before the switch: another clock
		{t0.Add(time.Second), 190 * time.Millisecond},           // after now
	} {
		got, _ := Step(rec, Released{At: c.at}, now)
		if got.Freeze != c.want || !got.ReleasedAt.Equal(t0.Add(c.want)) {
			t.Errorf("Released{At: %v}: freeze %v, released at %v; want %v", c.at, got.Freeze, got.ReleasedAt, c.want)
		}
	}
}

// TestPersistDue: lag reports that change nothing but the lag are stored at
// most every LagPersistEvery; everything else is stored at once.
func TestPersistDue(t *testing.T) {
	prev := New("m1", "t", "a", "b", Live, t0)
	prev.Phase = PhaseCatchUp
	rec := prev
	rec.LagBytes = 5 << 20
	every := 5 * time.Second
	for _, c := range []struct {
		name string
		rec  Record
		ev   Event
		now  time.Time
		want bool
	}{
		{"lag only, soon", rec, LagReport{Bytes: 5 << 20}, t0.Add(time.Second), false},
		{"lag only, later", rec, LagReport{Bytes: 5 << 20}, t0.Add(every), true},
		{"caught up", func() Record { r := rec; r.CaughtUp = true; r.Phase = PhaseWarm; return r }(), LagReport{Bytes: 100}, t0.Add(time.Second), true},
		{"failure", func() Record { r := rec; r.Failures = 1; return r }(), Failed{Err: "x"}, t0.Add(time.Second), true},
		{"another event", rec, StandbyStarted{}, t0.Add(time.Second), true},
	} {
		if got := persistDue(prev, c.rec, c.ev, c.now, t0, every); got != c.want {
			t.Errorf("%s: persistDue = %v, want %v", c.name, got, c.want)
		}
	}
	if !persistDue(prev, rec, LagReport{}, t0.Add(time.Millisecond), t0, -1) {
		t.Error("a negative interval must store every report")
	}
}
