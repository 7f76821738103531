package experiment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/stats"
	"github.com/sluicedb/sluice/lab/netns"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/migration"
)

// WANOptions configure the WAN experiment (`sluice bench wan`): a tenant
// moved back and forth between two hosts over a shaped, delayed link (two
// sites), under YCSB through a proxy on a third host whose paths to both
// are neither shaped nor delayed. Zero values take the defaults noted.
type WANOptions struct {
	Out      string        // output directory; "" = none written
	LinkMbit float64       // each server host's link, Mbit/s (1e6 bits) each way; default 200
	RTT      time.Duration // round trip added between the two server hosts (half each way, the delay line); default 10ms
	Moves    int           // migrations, alternating direction; default 8 (8 handovers)
	Size     int64         // tenant data to load, bytes; default 250e6
	TxRate   float64       // YCSB arrivals/s through the proxy; default 100
	MPL      int           // YCSB connections; default 8
	Settle   time.Duration // workload time on the new owner before the next move; default 3s
	Seed     uint64        // data, arrivals, keys, loss; default 1
	Binary   string        // the sluice executable the agents and proxy run; "" = this one
	Command  string        // the command line, for the report
	// Progress receives one line per step; nil = silent.
	Progress func(format string, args ...any)
}

func (o *WANOptions) defaults() {
	if o.LinkMbit == 0 {
		o.LinkMbit = 200
	}
	if o.RTT == 0 {
		o.RTT = 10 * time.Millisecond
	}
	if o.Moves == 0 {
		o.Moves = 8
	}
	if o.Size == 0 {
		o.Size = 250e6
	}
	if o.TxRate == 0 {
		o.TxRate = 100
	}
	if o.MPL == 0 {
		o.MPL = 8
	}
	if o.Settle == 0 {
		o.Settle = 3 * time.Second
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
}

// Check reports the first bad option (after defaults), as "wan: …".
func (o WANOptions) Check() error {
	o.defaults()
	switch {
	case !(o.LinkMbit >= 1 && o.LinkMbit <= 10000):
		return fmt.Errorf("wan: link %v Mbit/s: want 1..10000", o.LinkMbit)
	case o.RTT < 0 || o.RTT > 2*time.Second:
		return fmt.Errorf("wan: RTT %v: want 0..2s", o.RTT)
	case o.Moves < 1 || o.Moves > 100:
		return fmt.Errorf("wan: %d moves: want 1..100", o.Moves)
	case o.Size < 1e6:
		return fmt.Errorf("wan: tenant size %d bytes: want at least 1MB", o.Size)
	case !(o.TxRate > 0 && o.TxRate <= 1e5):
		return fmt.Errorf("wan: %v transactions/s: want a positive rate up to 100000", o.TxRate)
	case o.MPL < 1 || o.MPL > 1000:
		return fmt.Errorf("wan: %d connections: want 1..1000", o.MPL)
	}
	return nil
}

// Goals of the WAN benchmark (issue 51): the snapshot uses at least this
// share of the shaped link's capacity, and a handover's freeze p99 stays
// within FreezeGoalBase plus two round trips.
const (
	SnapshotGoalShare = 0.9
	FreezeGoalBase    = 250 * time.Millisecond
)

// WANResult is what the WAN experiment measured (the command's --json).
type WANResult struct {
	LinkMbitS float64 `json:"link_mbit_s"`
	// RTTMs is the measured round trip between the server hosts: the
	// median of TCP handshakes (RTTConfiguredMs is the delay line's 2·d).
	RTTMs           float64 `json:"rtt_ms"`
	RTTConfiguredMs float64 `json:"rtt_configured_ms"`
	// LinkTCPMBs is the baseline: one plain TCP stream host 1 → host 2 over
	// the same link for 5 s before anything else runs, MB/s (1e6 bytes).
	LinkTCPMBs float64 `json:"link_tcp_mb_s"`
	// SnapshotMBs is the median of the moves' snapshot rates (bytes the
	// snapshot sent while sending, over that time), MB/s.
	SnapshotMBs float64 `json:"snapshot_mb_s"`
	// LinkUtilization is SnapshotMBs over the shaped capacity
	// (LinkMbitS/8 MB/s); TCPUtilization over LinkTCPMBs.
	LinkUtilization float64 `json:"link_utilization"`
	TCPUtilization  float64 `json:"tcp_utilization"`
	// SharedMBs is the median of the moves' snapshot rate plus the WAL
	// that shared the link with it (WANMove.SharedMBs), MB/s.
	SharedMBs   float64 `json:"snapshot_and_wal_mb_s"`
	FreezeP50Ms float64 `json:"freeze_p50_ms"`
	FreezeP99Ms float64 `json:"freeze_p99_ms"`
	FreezeMaxMs float64 `json:"freeze_max_ms"`
	Handovers   int     `json:"handovers"`
	// Goals: SnapshotGoalShare of the capacity; FreezeGoalMs = 250 ms + 2 RTT.
	FreezeGoalMs       float64          `json:"freeze_goal_ms"`
	SnapshotGoalMet    bool             `json:"snapshot_goal_met"`
	FreezeGoalMet      bool             `json:"freeze_goal_met"`
	WritesAcknowledged int64            `json:"writes_acknowledged"`
	WritesMissing      int64            `json:"writes_missing"`
	WritesDuplicated   int64            `json:"writes_duplicated"`
	Workload           workload.Summary `json:"workload"`
	DelayLine          netns.DelayStats `json:"delay_line"`
	Moves              []WANMove        `json:"moves"`
	Series             []wanSecond      `json:"-"`
	Samples            []wanSample      `json:"-"`
	started            time.Time        // for the report
	bed                string           // the bed's description
}

// WANMove is one migration's figures.
type WANMove struct {
	N    int    `json:"n"`
	From string `json:"from"`
	To   string `json:"to"`
	// Snapshot: bytes sent between the first and the last progress sample
	// of the phase that counted any, over that time.
	SnapshotBytes   int64   `json:"snapshot_bytes"`
	SnapshotSeconds float64 `json:"snapshot_seconds"`
	SnapshotMBs     float64 `json:"snapshot_mb_s"`
	// AgentRateMBs is the agent's own figure for the copy (its last
	// progress rate in the phase), MB/s.
	AgentRateMBs float64 `json:"agent_rate_mb_s"`
	// EarlyWALBytes is the WAL the target received while the snapshot ran
	// (the target agent's wal_early_bytes, whole segments): it shared the
	// link with the snapshot. SharedMBs is the snapshot's rate plus this
	// over the snapshot's time, MB/s: the link's payload in that phase.
	EarlyWALBytes int64   `json:"early_wal_bytes"`
	SharedMBs     float64 `json:"snapshot_and_wal_mb_s"`
	FreezeMs      float64 `json:"freeze_ms"`
	Seconds       float64 `json:"seconds"`
	// HeldS and ReleasedS: the handover's hold and release, seconds since
	// the workload started.
	HeldS     float64 `json:"held_s"`
	ReleasedS float64 `json:"released_s"`
}

// wanSample is one progress poll of a move: seconds since the workload
// started, its phase and the phase's bytes.
type wanSample struct {
	T     float64
	Move  int
	Phase string
	Bytes int64
}

// wanSecond is one second of the workload, with the bytes the snapshots
// sent in it.
type wanSecond struct {
	workload.Second
	SnapshotMBs float64
}

// wanPoll is how often a move's progress is read.
const wanPoll = 100 * time.Millisecond

// WAN runs the experiment: it makes the hosts (lab/netns; needs root),
// measures the link's round trip and plain TCP rate, starts an agent on
// each server host and the proxy on its own, loads the tenant on host 1,
// runs YCSB through the proxy and moves the tenant o.Moves times, checks
// the ledger and writes the outputs. An error if the ledger is not exact.
func WAN(ctx context.Context, o WANOptions) (res WANResult, err error) {
	o.defaults()
	if err := o.Check(); err != nil {
		return res, err
	}
	if err := netns.Available(); err != nil {
		return res, fmt.Errorf("wan: %w", err)
	}
	res = WANResult{LinkMbitS: o.LinkMbit, RTTConfiguredMs: float64(o.RTT) / 1e6, started: time.Now(),
		FreezeGoalMs: float64(FreezeGoalBase+2*o.RTT) / 1e6}
	n, err := netns.New(netns.Options{})
	if err != nil {
		return res, err
	}
	defer n.Close()
	var hosts []*netns.Host
	for _, name := range []string{"host1", "host2", "proxy"} {
		h, err := n.AddHost(name)
		if err != nil {
			return res, err
		}
		hosts = append(hosts, h)
	}
	if err := n.ShapePath(hosts[0], hosts[1], o.LinkMbit); err != nil {
		return res, err
	}
	if err := n.Delay(hosts[0], hosts[1], o.RTT/2, 0, o.Seed); err != nil {
		return res, err
	}
	if res.RTTMs, err = measureRTT(ctx, hosts[0], hosts[1]); err != nil {
		return res, err
	}
	if res.LinkTCPMBs, err = measureTCP(ctx, hosts[0], hosts[1], 5*time.Second); err != nil {
		return res, err
	}
	o.Progress("link %.0f Mbit/s (%.1f MB/s), RTT %.1f ms measured (%.1f set); one TCP stream: %.2f MB/s",
		o.LinkMbit, o.LinkMbit/8, res.RTTMs, res.RTTConfiguredMs, res.LinkTCPMBs)
	bo := testbed.Options{Binary: o.Binary, Hosts: hosts[:2], ProxyHost: hosts[2], CPUs: -1, MemoryMB: -1, Progress: o.Progress}
	if o.Out != "" {
		bo.LogDir = filepath.Join(o.Out, "agents")
	}
	bed, err := testbed.Start(ctx, bo)
	if err != nil {
		return res, err
	}
	defer bed.Close()
	res.bed = fmt.Sprintf("2 server hosts and a proxy host (network namespaces); the servers' path htb-shaped to %.0f Mbit/s each way with %v RTT (user-space delay line), the proxy's paths neither; %s",
		o.LinkMbit, o.RTT, bed.Describe())
	err = wanMoves(ctx, o, bed, &res)
	res.DelayLine = n.DelayStats()
	res.summarise(o)
	if o.Out != "" {
		if werr := writeWANOutputs(o, res); err == nil {
			err = werr
		}
	}
	return res, err
}

// wanMoves loads the tenant, runs the workload and the moves, and checks
// the ledger.
func wanMoves(ctx context.Context, o WANOptions, bed *testbed.Bed, res *WANResult) error {
	tn, err := bed.CreateTenant(ctx, 0, "wan", o.Size, o.Seed)
	if err != nil {
		return err
	}
	run, err := workload.NewRunner(workload.Config{DSN: tn.DSN, Rate: o.TxRate, MPL: o.MPL, Records: tn.Rows, Duration: 24 * time.Hour, Seed: o.Seed + 2})
	if err != nil {
		return fmt.Errorf("wan: %w", err)
	}
	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	t0 := time.Now()
	var secs []workload.Second
	var secsMu sync.Mutex
	workDone := make(chan error, 1)
	go func() {
		var err error
		res.Workload, err = run.Run(wctx, func(x workload.Second) { secsMu.Lock(); secs = append(secs, x); secsMu.Unlock() })
		workDone <- err
	}()
	sleepCtx(ctx, o.Settle)
	var moveErr error
	for i := 0; i < o.Moves && moveErr == nil; i++ {
		var mv WANMove
		mv, moveErr = wanMove(ctx, bed, tn, i, t0, res)
		if moveErr == nil {
			res.Moves = append(res.Moves, mv)
			o.Progress("move %d %s→%s: snapshot %.1f MB in %.1f s = %.2f MB/s (%.0f%% of the link; agent says %.2f MB/s; with the WAL received meanwhile %.2f MB/s), freeze %.1f ms",
				mv.N, mv.From, mv.To, float64(mv.SnapshotBytes)/1e6, mv.SnapshotSeconds, mv.SnapshotMBs, 100*mv.SnapshotMBs/(o.LinkMbit/8), mv.AgentRateMBs, mv.SharedMBs, mv.FreezeMs)
		}
		sleepCtx(ctx, o.Settle)
	}
	stopWork()
	werr := <-workDone
	res.Series = wanSeries(secs, res.Samples)
	if moveErr != nil {
		return moveErr
	}
	if werr != nil && !errors.Is(werr, context.Canceled) {
		return fmt.Errorf("wan: workload: %w", werr)
	}
	vctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	chk, err := dtVerify(vctx, tn.DSN, run.Ledger)
	if err != nil {
		return err
	}
	res.WritesAcknowledged, res.WritesMissing, res.WritesDuplicated = chk.Acknowledged, chk.Missing, chk.Duplicated
	o.Progress("ledger: %d writes acknowledged, %d missing, %d duplicated", chk.Acknowledged, chk.Missing, chk.Duplicated)
	if !chk.OK() {
		return fmt.Errorf("wan: %d acknowledged writes missing, %d duplicated", chk.Missing, chk.Duplicated)
	}
	return nil
}

// wanMove moves tn to the other server, polling its progress every
// wanPoll, and returns its figures.
func wanMove(ctx context.Context, bed *testbed.Bed, tn testbed.Tenant, i int, t0 time.Time, res *WANResult) (WANMove, error) {
	from, id, err := bed.Owner(ctx, tn)
	if err != nil {
		return WANMove{}, err
	}
	to := 1 - from
	src := bed.Servers[from].Client
	m, err := src.StartMigration(ctx, agentclient.StartMigration{Tenant: id, To: bed.Servers[to].Name})
	if err != nil {
		return WANMove{}, fmt.Errorf("wan: move %d: %w", i+1, err)
	}
	mv := WANMove{N: i + 1, From: bed.Servers[from].Name, To: bed.Servers[to].Name}
	var first, last *wanSample
	for !m.Done {
		select {
		case <-ctx.Done():
			src.AbortMigration(context.Background(), m.ID)
			return mv, ctx.Err()
		case <-time.After(wanPoll):
		}
		if m, err = src.Migration(ctx, m.ID); err != nil {
			return mv, err
		}
		s := wanSample{T: time.Since(t0).Seconds(), Move: mv.N, Phase: m.Progress.Phase, Bytes: m.Progress.Bytes}
		res.Samples = append(res.Samples, s)
		if s.Phase == string(migration.PhaseSnapshot) && s.Bytes > 0 {
			if first == nil {
				first = &s
			}
			last = &s
			mv.AgentRateMBs = m.Progress.Rate / 1e6
		}
	}
	if m.Outcome != "committed" {
		return mv, fmt.Errorf("wan: move %d (%s) ended %s: %s", mv.N, m.ID, m.Outcome, m.Error)
	}
	if first != nil && last.T > first.T {
		mv.SnapshotBytes, mv.SnapshotSeconds = last.Bytes-first.Bytes, last.T-first.T
		mv.SnapshotMBs = float64(mv.SnapshotBytes) / 1e6 / mv.SnapshotSeconds
	}
	if m.Summary != nil {
		mv.FreezeMs, mv.Seconds = m.Summary.FreezeMS, m.Summary.Seconds
	}
	if tm, err := bed.Servers[to].Client.Migration(ctx, m.ID); err == nil {
		mv.EarlyWALBytes = tm.WALEarlyBytes
	}
	if mv.SnapshotSeconds > 0 {
		mv.SharedMBs = mv.SnapshotMBs + float64(mv.EarlyWALBytes)/1e6/mv.SnapshotSeconds
	}
	var rec migration.Record
	if json.Unmarshal(m.Record, &rec) == nil && !rec.HeldAt.IsZero() {
		mv.HeldS, mv.ReleasedS = rec.HeldAt.Sub(t0).Seconds(), rec.ReleasedAt.Sub(t0).Seconds()
	}
	return mv, nil
}

// summarise fills the medians, percentiles and goals from the moves.
func (r *WANResult) summarise(o WANOptions) {
	var snap, shared, freeze []float64
	for _, m := range r.Moves {
		if m.SnapshotMBs > 0 {
			snap = append(snap, m.SnapshotMBs)
			shared = append(shared, m.SharedMBs)
		}
		freeze = append(freeze, m.FreezeMs)
	}
	slices.Sort(freeze)
	r.Handovers = len(freeze)
	if len(snap) > 0 {
		r.SnapshotMBs, r.SharedMBs = round(stats.Median(snap), 2), round(stats.Median(shared), 2)
	}
	r.LinkUtilization = round(r.SnapshotMBs/(o.LinkMbit/8), 3)
	if r.LinkTCPMBs > 0 {
		r.TCPUtilization = round(r.SnapshotMBs/r.LinkTCPMBs, 3)
	}
	r.FreezeP50Ms = round(workload.Quantile(freeze, 0.5), 1)
	r.FreezeP99Ms = round(workload.Quantile(freeze, 0.99), 1)
	if len(freeze) > 0 {
		r.FreezeMaxMs = round(freeze[len(freeze)-1], 1)
	}
	r.SnapshotGoalMet = len(snap) > 0 && r.LinkUtilization >= SnapshotGoalShare
	r.FreezeGoalMet = len(freeze) > 0 && r.FreezeP99Ms <= r.FreezeGoalMs
	r.RTTMs, r.LinkTCPMBs = round(r.RTTMs, 2), round(r.LinkTCPMBs, 2)
}

// measureRTT is the median of 9 TCP handshakes from a to a listener on b,
// in ms.
func measureRTT(ctx context.Context, a, b *netns.Host) (float64, error) {
	l, err := b.Listen("tcp", net.JoinHostPort(b.Addr, "0"))
	if err != nil {
		return 0, fmt.Errorf("wan: rtt: %w", err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	var xs []float64
	for range 9 {
		start := time.Now()
		c, err := a.DialContext(ctx, "tcp", l.Addr().String())
		if err != nil {
			return 0, fmt.Errorf("wan: rtt: %w", err)
		}
		xs = append(xs, float64(time.Since(start))/1e6)
		c.Close()
	}
	return stats.Median(xs), nil
}

// measureTCP sends one TCP stream from a to b for d and returns what b
// received over d, MB/s: what the link carries for one plain stream.
func measureTCP(ctx context.Context, a, b *netns.Host, d time.Duration) (float64, error) {
	l, err := b.Listen("tcp", net.JoinHostPort(b.Addr, "0"))
	if err != nil {
		return 0, fmt.Errorf("wan: tcp: %w", err)
	}
	defer l.Close()
	got := make(chan float64, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- 0
			return
		}
		defer c.Close()
		start := time.Now()
		k, _ := io.Copy(io.Discard, c)
		got <- float64(k) / 1e6 / time.Since(start).Seconds()
	}()
	c, err := a.DialContext(ctx, "tcp", l.Addr().String())
	if err != nil {
		return 0, fmt.Errorf("wan: tcp: %w", err)
	}
	c.SetWriteDeadline(time.Now().Add(d))
	buf := make([]byte, 256<<10)
	for {
		if _, err := c.Write(buf); err != nil {
			break
		}
	}
	c.Close()
	return <-got, nil
}
