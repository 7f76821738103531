package migration

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// relaySide is a Source or Target whose WAL relay is counted in calls; with
// relays false it answers ErrUnsupported, as a side that relays nothing.
type relaySide struct {
	relays  bool
	n       int64
	unpaced []bool
}

func (r *relaySide) UnpaceWAL(on bool) error {
	if !r.relays {
		return ErrUnsupported
	}
	r.unpaced = append(r.unpaced, on)
	return nil
}

func (r *relaySide) WALRelayed() (int64, error) {
	if !r.relays {
		return 0, ErrUnsupported
	}
	return r.n, nil
}

type (
	relaySource struct {
		fakeSource
		*relaySide
		admitted []int // FenceEarly's admit, when it was called
		early    bool  // FenceEarly supported
	}
	relayTarget struct {
		fakeTarget
		*relaySide
	}
)

func (s *relaySource) UnpaceWAL(on bool) error    { return s.relaySide.UnpaceWAL(on) }
func (s *relaySource) WALRelayed() (int64, error) { return s.relaySide.WALRelayed() }
func (t *relayTarget) UnpaceWAL(on bool) error    { return t.relaySide.UnpaceWAL(on) }
func (t *relayTarget) WALRelayed() (int64, error) { return t.relaySide.WALRelayed() }
func (t *relayTarget) Addr(Record) string         { return "target:5432" }
func (s *relaySource) FenceEarly(_ context.Context, admit []int) error {
	if !s.early {
		return ErrUnsupported
	}
	s.admitted = admit
	return nil
}

// listRouter is a DirectRouter whose Backends names pids (nil: unsupported)
// and whose Hold holds idle.
type listRouter struct {
	DirectRouter
	pids, idle []int
}

func (r listRouter) Backends(context.Context, string) ([]int, error) {
	if r.pids == nil {
		return nil, ErrUnsupported
	}
	return r.pids, nil
}

func (r listRouter) Hold(context.Context, string, time.Duration) ([]int, error) { return r.idle, nil }

var (
	_ Source = (*relaySource)(nil)
	_ Target = (*relayTarget)(nil)
	_ Router = listRouter{}
)

// TestWALRelayerChoice: the Target's relay is unpaced and counted when it
// relays; when it answers ErrUnsupported, the Source's.
func TestWALRelayerChoice(t *testing.T) {
	for _, tc := range []struct {
		name          string
		targetRelays  bool
		wantSrc, want []bool // UnpaceWAL calls on the source, the target
		wantN         int64
	}{
		{"source relays", false, []bool{true, false}, nil, 1},
		{"target relays", true, nil, []bool{true, false}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &relaySource{relaySide: &relaySide{relays: true, n: 1}}
			tgt := &relayTarget{relaySide: &relaySide{relays: tc.targetRelays, n: 2}}
			r := &runner{env: Env{Source: src, Target: tgt}}
			r.unpaceWAL(true)
			r.unpaceWAL(false)
			if n, ok := r.walRelayed(); !ok || n != tc.wantN {
				t.Errorf("walRelayed = %d, %t; want %d", n, ok, tc.wantN)
			}
			if !slices.Equal(src.unpaced, tc.wantSrc) || !slices.Equal(tgt.unpaced, tc.want) {
				t.Errorf("unpaced: source %v, target %v; want %v, %v", src.unpaced, tgt.unpaced, tc.wantSrc, tc.want)
			}
		})
	}
}

// TestOptionalCapabilities: what a Router or Source cannot do
// (ErrUnsupported) the driver goes without: no early fence unless both
// the router lists its backends and the source fences early; preparations
// that are unsupported do not fail WARM; Hold's idle backends reach Held.
func TestOptionalCapabilities(t *testing.T) {
	ctx := context.Background()
	rec := Record{ID: "m1", Tenant: "t1", Mode: Live, Fence: FenceReadOnly, Phase: PhaseWarm}
	for _, tc := range []struct {
		name  string
		pids  []int
		early bool
		want  []int // FenceEarly's admit; nil: not called
	}{
		{"router lists, source fences early", []int{7, 8}, true, []int{7, 8}},
		{"router cannot list", nil, true, nil},
		{"source cannot fence early", []int{7}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &relaySource{relaySide: &relaySide{relays: true}, early: tc.early}
			env := Env{Source: src, Target: &relayTarget{relaySide: &relaySide{}}, Router: listRouter{pids: tc.pids, idle: []int{9}}}
			env.defaults()
			r := &runner{env: env}
			if err := r.prepareHandover(ctx, rec); err != nil {
				t.Fatalf("prepareHandover with nothing supported: %v", err)
			}
			if err := r.fenceEarly(ctx, rec); err != nil {
				t.Fatalf("fenceEarly: %v", err)
			}
			if !slices.Equal(src.admitted, tc.want) {
				t.Errorf("FenceEarly admitted %v, want %v", src.admitted, tc.want)
			}
			ev := r.execute(ctx, rec, Hold{Deadline: time.Second})
			if h, ok := ev.(Held); !ok || !slices.Equal(h.Idle, []int{9}) {
				t.Errorf("Hold's event %v, want held with idle [9]", ev)
			}
		})
	}
}

// holdRouter is a DirectRouter that says whether it holds.
type holdRouter struct {
	DirectRouter
	held bool
	err  error
}

func (r holdRouter) Holding(context.Context, string) (bool, error) { return r.held, r.err }

// fencingSource records whether Fence ran.
type fencingSource struct {
	fakeSource
	fenced *bool
}

func (s fencingSource) Fence(context.Context, FenceMode, []int) (LSN, error) {
	*s.fenced = true
	return 0x5000000, nil
}

// TestFenceNeedsTheHold: a live read-only fence runs only while the router
// still holds the tenant (it spares the backends the hold named idle); a
// router that lost its hold — it restarted — fails the handover before the
// fence, and one that cannot say is trusted. A fence by stop needs no hold.
func TestFenceNeedsTheHold(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		router Router
		mode   FenceMode
		fenced bool
	}{
		{"router holds", holdRouter{held: true}, FenceReadOnly, true},
		{"router lost its hold", holdRouter{held: false}, FenceReadOnly, false},
		{"router unreachable", holdRouter{err: errors.New("connection refused")}, FenceReadOnly, false},
		{"router cannot say", DirectRouter{}, FenceReadOnly, true},
		{"fence by stop", holdRouter{held: false}, FenceStop, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fenced bool
			env := Env{Source: fencingSource{fenced: &fenced}, Target: fakeTarget{}, Router: tc.router}
			env.defaults()
			r := &runner{env: env}
			rec := Record{ID: "m1", Tenant: "t1", Mode: Live, Fence: tc.mode, Phase: PhaseHandover}
			ev := r.execute(ctx, rec, Fence{Mode: tc.mode})
			_, ok := ev.(Fenced)
			if ok != tc.fenced || fenced != tc.fenced {
				t.Fatalf("event %v, fenced %t; want fenced %t", ev, fenced, tc.fenced)
			}
		})
	}
}
