package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/snapshot"
)

// migrateResult is what `sluice migrate --json` prints: the final migration
// and its summary figures.
type migrateResult struct {
	ID         string  `json:"id"`
	Tenant     int64   `json:"tenant"`
	From       string  `json:"from"`
	To         string  `json:"to"`
	Mode       string  `json:"mode"`
	Outcome    string  `json:"outcome"` // committed, aborted, or "running" when not followed to the end
	Error      string  `json:"error,omitempty"`
	Bytes      int64   `json:"bytes"`
	Seconds    float64 `json:"seconds"`
	FreezeMS   float64 `json:"freeze_ms"`
	DowntimeMS float64 `json:"downtime_ms"`
	// Checkpoint and CheckpointSeconds: how the snapshot's checkpoint was
	// taken and how long it took (agent/client.Summary); absent for
	// stop-and-copy.
	Checkpoint        string  `json:"checkpoint,omitempty"`
	CheckpointSeconds float64 `json:"checkpoint_seconds,omitempty"`
	// WALRelay and WALBytes: where the standby's WAL stream was relayed and
	// how much it passed (agent/client.Summary); absent for stop-and-copy.
	WALRelay string `json:"wal_relay,omitempty"`
	WALBytes int64  `json:"wal_relayed_bytes,omitempty"`
}

func init() {
	var (
		agentURL, to, rate, mode                string
		catchUpTimeout                          string
		checkpoint                              string
		walRelay                                string
		tenant                                  int64
		asJSON, detach                          bool
		controller, setpoint                    string
		clientLatency                           string
		maxRate                                 string
		kp, ki, kd, k, startGrowth, rearmGrowth float64
		startBackoff                            int
		idleFloor                               float64
		errorFloor, headroom                    float64
		meanHorizon                             int
	)
	cmd := &cobra.Command{
		Use:   "migrate --tenant ID --to AGENT [--agent URL] [--rate R] [--mode live|stop-and-copy] [--controller pid --setpoint 40ms --max-rate R]",
		Short: "Move a tenant to another agent and follow it: phase, bytes, rate, ETA, lag",
		Long: `Start a migration of tenant ID from the agent at --agent (its current home) to
AGENT (a peer name from the source agent's config, or an agent URL), then follow
it: a live progress line on a terminal (plain lines otherwise) and a final
summary (bytes, seconds, freeze or downtime). --rate caps the copy (e.g. 20MB/s;
default unlimited); change it later with POST /v1/migrations/{id}/rate.
With --controller, the source agent runs a control loop that sets the rate every
second from the latency its proxy measures (--setpoint for pid; --k for
integral, from sluice tune); --max-rate is the top speed (required), --rate the
starting rate, and the progress line shows latency against the setpoint.
Interrupting the command stops following; the migration carries on.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tenant <= 0 {
				return cli.Usagef("migrate: --tenant ID is required (a positive integer)")
			}
			if to == "" {
				return cli.Usagef("migrate: --to AGENT is required")
			}
			if mode != "live" && mode != "stop-and-copy" {
				return cli.Usagef("migrate: --mode %q: want live or stop-and-copy", mode)
			}
			if _, _, err := snapshot.ParseCheckpoint(checkpoint); err != nil {
				return cli.Usagef("migrate: --checkpoint: %v", err)
			}
			if walRelay != client.WALRelayTarget && walRelay != client.WALRelaySource {
				return cli.Usagef("migrate: --wal-relay %q: want target or source", walRelay)
			}
			if _, err := migration.ParseCatchUpTimeout(catchUpTimeout); err != nil {
				return cli.Usagef("migrate: --catch-up-timeout %v", err)
			}
			r := 0.0
			if rate != "" {
				v, err := units.ParseRate(rate)
				if err != nil {
					return cli.Usagef("migrate: --rate: %v", err)
				}
				if v == 0 {
					return cli.Usagef("migrate: --rate 0 would never finish; omit it for unlimited")
				}
				if !math.IsInf(v, 1) {
					r = v
				}
			}
			var ctl *client.Control
			if controller != "" {
				ctl = &client.Control{Controller: controller, K: k, Rate: r}
				if maxRate == "" {
					return cli.Usagef("migrate: --controller needs --max-rate, the migration's top speed")
				}
				v, err := units.ParseRate(maxRate)
				if err != nil || v <= 0 || math.IsInf(v, 0) {
					return cli.Usagef("migrate: --max-rate %q: want a positive finite rate such as 50MB/s", maxRate)
				}
				ctl.MaxRate = v
				if setpoint != "" {
					d, err := time.ParseDuration(setpoint)
					if err != nil || d <= 0 {
						return cli.Usagef("migrate: --setpoint %q: want a positive duration such as 40ms", setpoint)
					}
					ctl.SetpointMs = float64(d) / float64(time.Millisecond)
				}
				if cmd.Flags().Changed("start-growth") {
					if !(startGrowth >= 1 && startGrowth <= 4) {
						return cli.Usagef("migrate: --start-growth %v: want 1 (none) to 4", startGrowth)
					}
					ctl.StartGrowth = startGrowth
				}
				if cmd.Flags().Changed("rearm-growth") {
					if !(rearmGrowth >= 1 && rearmGrowth <= 4) {
						return cli.Usagef("migrate: --rearm-growth %v: want 1 (the slow start's) to 4", rearmGrowth)
					}
					ctl.RearmGrowth = rearmGrowth
				}
				if cmd.Flags().Changed("start-backoff") {
					if startBackoff < 0 || startBackoff > control.MaxStartBackoff {
						return cli.Usagef("migrate: --start-backoff %d: want 0 (none) to %d steps", startBackoff, control.MaxStartBackoff)
					}
					ctl.StartBackoff = startBackoff
				}
				if cmd.Flags().Changed("idle-floor") {
					if !(idleFloor >= 0 && idleFloor < 1) {
						return cli.Usagef("migrate: --idle-floor %v: want a fraction in [0, 1) (0 = none)", idleFloor)
					}
					ctl.IdleFloor = idleFloor
				}
				for _, o := range []struct {
					name, want string
					v          float64
					dst        *float64
				}{
					{"error-floor", "a fraction of the setpoint >= 0 (0 = none)", errorFloor, &ctl.ErrorFloor},
					{"headroom", "a fraction >= 0 (0 = off)", headroom, &ctl.Headroom},
				} {
					if !cmd.Flags().Changed(o.name) {
						continue
					}
					if !(o.v >= 0) || math.IsInf(o.v, 0) {
						return cli.Usagef("migrate: --%s %v: want %s", o.name, o.v, o.want)
					}
					if controller != "pid" {
						return cli.Usagef("migrate: --%s goes with --controller pid, not %s", o.name, controller)
					}
					*o.dst = o.v
				}
				if meanHorizon < 0 || meanHorizon > 3600 {
					return cli.Usagef("migrate: --mean-horizon %d: want 0 (off) to 3600 steps", meanHorizon)
				}
				switch {
				case controller == "pid":
					ctl.MeanHorizon = meanHorizon
				case cmd.Flags().Changed("mean-horizon"):
					return cli.Usagef("migrate: --mean-horizon goes with --controller pid, not %s", controller)
				}
				for _, g := range []struct {
					name string
					v    float64
					dst  **float64
				}{{"kp", kp, &ctl.Kp}, {"ki", ki, &ctl.Ki}, {"kd", kd, &ctl.Kd}} {
					if cmd.Flags().Changed(g.name) {
						v := g.v
						*g.dst = &v
					}
				}
				if clientLatency != "" {
					if err := client.CheckClientLatencyURL(clientLatency); err != nil {
						return cli.Usagef("migrate: --client-latency %v", err)
					}
					ctl.ClientLatencyURL = clientLatency
				}
			} else if setpoint != "" || maxRate != "" || clientLatency != "" || cmd.Flags().Changed("mean-horizon") || cmd.Flags().Changed("error-floor") || cmd.Flags().Changed("headroom") {
				return cli.Usagef("migrate: --setpoint, --max-rate, --client-latency, --mean-horizon, --error-floor and --headroom go with --controller")
			}
			c, err := agentClient(agentURL)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			m, err := c.StartMigration(ctx, client.StartMigration{Tenant: tenant, To: to, Rate: r, Mode: mode, Checkpoint: checkpoint, WALRelay: walRelay, CatchUpTimeout: catchUpTimeout, Control: ctl})
			if err != nil {
				return agentErr("migrate", err)
			}
			errw := cmd.ErrOrStderr()
			if !asJSON {
				loopText := ""
				if ctl != nil {
					loopText = fmt.Sprintf(", %s control loop up to %s", ctl.Controller, units.FormatRate(ctl.MaxRate))
				}
				fmt.Fprintf(errw, "migration %s: tenant %d from %s to %s (%s, rate %s%s)\n", m.ID, tenant, c.URL(), m.Peer, mode, units.FormatRate(limiterRateCLI(r)), loopText)
			}
			if detach {
				return printMigrate(cmd.OutOrStdout(), asJSON, result(m, c.URL()))
			}
			final, err := follow(ctx, c, m.ID, errw, !asJSON, cli.IsTerminal(errw))
			if errors.Is(err, context.Canceled) {
				fmt.Fprintf(errw, "\nstopped following; migration %s continues on %s\n", m.ID, c.URL())
				return printMigrate(cmd.OutOrStdout(), asJSON, result(final, c.URL()))
			}
			if err != nil {
				return fmt.Errorf("migrate: %w", err)
			}
			res := result(final, c.URL())
			if err := printMigrate(cmd.OutOrStdout(), asJSON, res); err != nil {
				return err
			}
			if res.Outcome != "committed" {
				return fmt.Errorf("migrate: migration %s %s: %s", final.ID, res.Outcome, final.Error)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Int64Var(&tenant, "tenant", 0, "tenant id to move")
	f.StringVar(&to, "to", "", "target agent: a peer name of the source agent, or its URL")
	f.StringVar(&agentURL, "agent", "", "source agent API URL (default $SLUICE_AGENT or "+defaultAgentURL+")")
	f.StringVar(&rate, "rate", "", "copy rate cap, e.g. 20MB/s (default unlimited); with --controller: the fixed controller's rate, the PID's starting rate (default a tenth of --max-rate)")
	f.StringVar(&mode, "mode", "live", "live or stop-and-copy")
	f.StringVar(&checkpoint, "checkpoint", "fast", "how the snapshot's checkpoint writes the source's dirty buffers: fast (at once), spread (the server's own pacing, minutes by default), or a pace such as 3s (spread over about that long, up to 27s; the copy starts that much later)")
	f.StringVar(&walRelay, "wal-relay", "target", "where the standby's WAL stream of catch-up is relayed and paced: target (the target agent: the source's CPU pays only its walsender) or source (the source agent)")
	f.StringVar(&catchUpTimeout, "catch-up-timeout", "", "how long the catch-up of the WAL written during the copy may take before the migration rolls back, e.g. 30m (default 10m); the progress warns early when it will not end in time")
	f.BoolVar(&asJSON, "json", false, "print one final JSON object instead of progress and summary")
	f.BoolVar(&detach, "detach", false, "start the migration and return at once")
	f.StringVar(&controller, "controller", "", "run a control loop in the source agent: fixed, pid, integral or interference")
	f.StringVar(&setpoint, "setpoint", "", "latency the controller holds, e.g. 40ms (pid)")
	f.StringVar(&maxRate, "max-rate", "", "the controller's top speed, e.g. 50MB/s")
	f.Float64Var(&kp, "kp", 0, "PID proportional gain (default Slacker's 0.025)")
	f.Float64Var(&ki, "ki", 0, "PID integral gain (default Slacker's 0.005)")
	f.Float64Var(&kd, "kd", 0, "PID derivative gain (default Slacker's 0.015)")
	f.Float64Var(&startGrowth, "start-growth", 0, "PID slow start: rate × this per step until the latency is half-way to the setpoint (default none)")
	f.Float64Var(&rearmGrowth, "rearm-growth", 0, "PID with a slow start: after a pause, rate × this per step back to the rate that last held the setpoint (default: the slow start's growth, to half the peak)")
	f.IntVar(&startBackoff, "start-backoff", 0, "PID with a slow start: when it ends, take back this many steps of its growth, since the latency that ended it is a few steps old (default 0: none)")
	f.Float64Var(&idleFloor, "idle-floor", 0, "PID with a slow start and a mean horizon: repay latency owed no lower than this fraction of the way from the idle latency to the setpoint, where the copy would crawl (default 0: none, down to half the setpoint)")
	f.Float64Var(&errorFloor, "error-floor", 0, "PID: a latency window more than (1 + this)× the setpoint slows the copy as one at that level would, so a one-second stall no speed causes does not cut it to a crawl (default 0: none, Slacker)")
	f.Float64Var(&headroom, "headroom", 0, "PID: while the copy moves less than it is allowed (bound elsewhere: the target's CPU, a disk, the network), allow at most (1 + this)× what it moved, so a cut bites at once (default 0: off)")
	f.IntVar(&meanHorizon, "mean-horizon", control.DefaultMeanHorizon, "PID: hold the migration's mean latency (not each window's) at the setpoint, working off a shortfall or excess over this many steps, or, once the copy's time left is known, over the rest of the run (0 = off: each window against the setpoint, Slacker)")
	f.StringVar(&clientLatency, "client-latency", "", "also steer by the clients' own latency (queue wait + execution, which the proxy cannot see): an http URL serving latency windows, e.g. the address of `sluice workload run --latency-listen`")
	f.Float64Var(&k, "k", 0, "integral controller gain, (bytes/s) per second of latency error (sluice tune proposes one)")
	root.AddCommand(cmd)
}

func limiterRateCLI(r float64) float64 {
	if r <= 0 {
		return math.Inf(1)
	}
	return r
}

// follow polls migration id until it is done, printing progress to w when
// show is set: one rewritten line on a terminal, else a line per phase
// change and at most one every 2 s.
func follow(ctx context.Context, c *client.Client, id string, w io.Writer, show, tty bool) (client.Migration, error) {
	every := time.Second
	if tty {
		every = 250 * time.Millisecond
	}
	var last client.Migration
	var lastPhase string
	var lastPrint time.Time
	fails := 0
	for {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := c.Migration(rctx, id)
		cancel()
		if ctx.Err() != nil {
			return last, ctx.Err()
		}
		if err != nil {
			// The source agent may be restarting; keep trying for a while.
			if fails++; fails > 60 {
				return last, err
			}
		} else {
			fails = 0
			last = m
			if show {
				line := progressLine(m)
				switch {
				case tty:
					fmt.Fprintf(w, "\r\033[K%s", line)
				case m.Progress.Phase != lastPhase || time.Since(lastPrint) >= 2*time.Second || m.Done:
					fmt.Fprintln(w, line)
					lastPrint = time.Now()
				}
				lastPhase = m.Progress.Phase
			}
			if m.Done {
				if show && tty {
					fmt.Fprintln(w)
				}
				return m, nil
			}
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(every):
		}
	}
}

// transferLine renders a progress line's bytes, rate, ETA and lag.
func transferLine(b *strings.Builder, p client.Progress) {
	if p.TotalBytes > 0 {
		fmt.Fprintf(b, "  %s / %s (%.0f%%)", units.FormatBytes(float64(p.Bytes)), units.FormatBytes(float64(p.TotalBytes)), 100*math.Min(1, float64(p.Bytes)/float64(p.TotalBytes)))
	} else {
		fmt.Fprintf(b, "  %s", units.FormatBytes(float64(p.Bytes)))
	}
	fmt.Fprintf(b, "  %s", units.FormatRate(p.Rate))
	if p.Limit > 0 {
		fmt.Fprintf(b, " (cap %s)", units.FormatRate(p.Limit))
	}
	if p.ETASeconds >= 0 {
		fmt.Fprintf(b, "  ETA %s", (time.Duration(p.ETASeconds * float64(time.Second))).Round(time.Second))
	} else {
		b.WriteString("  ETA -")
	}
	if p.LagBytes >= 0 {
		fmt.Fprintf(b, "  lag %s", units.FormatBytes(float64(p.LagBytes)))
	} else {
		b.WriteString("  lag -")
	}
}

// progressLine renders phase, bytes, rate, ETA and lag.
func progressLine(m client.Migration) string {
	p := m.Progress
	var b strings.Builder
	fmt.Fprintf(&b, "%-9s", p.Phase)
	if ckpt, ok := strings.CutPrefix(p.Action, "checkpoint "); ok {
		// No byte moves until the source's checkpoint is done.
		fmt.Fprintf(&b, "  waiting for the source's checkpoint (%s)", ckpt)
	} else {
		transferLine(&b, p)
	}
	if p.Controller != "" {
		if p.LatencyMs >= 0 {
			fmt.Fprintf(&b, "  latency %.1f ms", p.LatencyMs)
		} else {
			b.WriteString("  latency -")
		}
		if p.SetpointMs > 0 {
			fmt.Fprintf(&b, " (setpoint %.1f, %s)", p.SetpointMs, p.Controller)
		} else {
			fmt.Fprintf(&b, " (%s)", p.Controller)
		}
		if c := p.CPUThrottledPct; c != nil {
			fmt.Fprintf(&b, "  source CPU throttled %.0f%%", *c)
		}
	}
	if p.Warning != "" {
		fmt.Fprintf(&b, "  warning: %s", p.Warning)
	}
	return b.String()
}

func result(m client.Migration, from string) migrateResult {
	r := migrateResult{ID: m.ID, Tenant: m.Tenant, From: from, To: m.Peer, Mode: m.Mode, Outcome: "running", Error: m.Error}
	if m.Done {
		r.Outcome = m.Outcome
	}
	if s := m.Summary; s != nil {
		r.Bytes, r.Seconds, r.FreezeMS, r.DowntimeMS = s.Bytes, s.Seconds, s.FreezeMS, s.DowntimeMS
		r.Checkpoint, r.CheckpointSeconds = s.Checkpoint, s.CheckpointSeconds
		r.WALRelay, r.WALBytes = s.WALRelay, s.WALBytes
	}
	return r
}

func printMigrate(w io.Writer, asJSON bool, r migrateResult) error {
	if asJSON {
		return cli.WriteJSON(w, r)
	}
	switch r.Outcome {
	case "committed":
		pause := fmt.Sprintf("freeze %.0f ms", r.FreezeMS)
		if r.Mode == "stop-and-copy" {
			pause = fmt.Sprintf("downtime %.0f ms", r.DowntimeMS)
		}
		if r.Checkpoint != "" {
			pause += fmt.Sprintf("; checkpoint %s, %.1f s", r.Checkpoint, r.CheckpointSeconds)
		}
		if r.WALRelay != "" {
			pause += fmt.Sprintf("; WAL relayed by the %s, %s", r.WALRelay, units.FormatBytes(float64(r.WALBytes)))
		}
		fmt.Fprintf(w, "migration %s committed: tenant %d now on %s; %s in %.1f s, %s\n", r.ID, r.Tenant, r.To, units.FormatBytes(float64(r.Bytes)), r.Seconds, pause)
	case "running":
		fmt.Fprintf(w, "migration %s running: tenant %d to %s\n", r.ID, r.Tenant, r.To)
	default:
		fmt.Fprintf(w, "migration %s %s after %s in %.1f s: tenant %d stays on %s: %s\n", r.ID, r.Outcome, units.FormatBytes(float64(r.Bytes)), r.Seconds, r.Tenant, r.From, r.Error)
	}
	return nil
}

// `sluice migration list|show|rate|abort`: inspect and steer migrations on an agent.
func init() {
	var agentURL string
	var asJSON bool
	mc := &cobra.Command{
		Use:   "migration",
		Short: "List, show, re-rate or abort migrations on an agent",
	}
	mc.PersistentFlags().StringVar(&agentURL, "agent", "", "agent API URL (default $SLUICE_AGENT or "+defaultAgentURL+")")
	mc.PersistentFlags().BoolVar(&asJSON, "json", false, "print the result as JSON")

	list := &cobra.Command{
		Use:   "list",
		Short: "List the agent's migrations (source and target sides)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := agentClient(agentURL)
			if err != nil {
				return err
			}
			ms, err := c.Migrations(cmd.Context())
			if err != nil {
				return agentErr("migration list", err)
			}
			if asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), ms)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tTENANT\tROLE\tPEER\tMODE\tPHASE\tOUTCOME\tERROR")
			for _, m := range ms {
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Tenant, m.Role, m.Peer, m.Mode, m.Progress.Phase, dash(m.Outcome), dash(m.Error))
			}
			return w.Flush()
		},
	}
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show one migration: progress line, or the full object with --json",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := agentClient(agentURL)
			if err != nil {
				return err
			}
			m, err := c.Migration(cmd.Context(), args[0])
			if err != nil {
				return agentErr("migration show", err)
			}
			if asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), m)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s (%s of tenant %d, peer %s): %s\n", m.ID, m.Role, m.Tenant, m.Peer, progressLine(m))
			if m.Done {
				return printMigrate(cmd.OutOrStdout(), false, result(m, c.URL()))
			}
			return nil
		},
	}
	rate := &cobra.Command{
		Use:   "rate ID RATE",
		Short: "Change a running migration's copy rate at once (e.g. 50MB/s, or unlimited)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := units.ParseRate(args[1])
			if err != nil {
				return cli.Usagef("migration rate: %v", err)
			}
			if v == 0 {
				return cli.Usagef("migration rate: 0 would stall the copy; use abort to stop it")
			}
			if math.IsInf(v, 1) {
				v = 0 // the API's unlimited
			}
			c, err := agentClient(agentURL)
			if err != nil {
				return err
			}
			m, err := c.SetRate(cmd.Context(), args[0], v)
			if err != nil {
				return agentErr("migration rate", err)
			}
			if asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), m)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: rate %s\n", m.ID, units.FormatRate(limiterRateCLI(v)))
			return nil
		},
	}
	abort := &cobra.Command{
		Use:   "abort ID",
		Short: "Roll a migration back (refused after the route switch)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := agentClient(agentURL)
			if err != nil {
				return err
			}
			m, err := c.AbortMigration(cmd.Context(), args[0])
			if err != nil {
				return agentErr("migration abort", err)
			}
			if asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), m)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: abort requested (phase %s); follow with `sluice migration show %s`\n", m.ID, m.Progress.Phase, m.ID)
			return nil
		},
	}
	mc.AddCommand(list, show, rate, abort)
	root.AddCommand(mc)
}
