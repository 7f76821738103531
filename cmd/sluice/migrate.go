package main

import (
	"context"
	"encoding/json"
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
	"github.com/spf13/pflag"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/migration"
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
		agentURL, to, rate, mode, catchUpTimeout string
		checkpoint, walRelay, deadline           string
		holdDeadline                             string
		setpoint, percentile, maxRate, profile   string
		tenant                                   int64
		asJSON, detach                           bool
	)
	cmd := &cobra.Command{
		Use:   "migrate --tenant ID --to AGENT [--setpoint 40ms] [--max-rate R | --rate R]",
		Short: "Move a tenant to another agent and follow it: phase, bytes, rate, ETA, lag, latency",
		Long: `Start a migration of tenant ID from the agent at --agent (its current home) to
AGENT (a peer name from the source agent's config, or an agent URL), then follow
it: a live progress line on a terminal (plain lines otherwise) and a final
summary (bytes, seconds, freeze or downtime).

With --setpoint, the source agent's control loop sets the copy's speed every
second from the latency its proxy measures, to hold the clients' mean latency
during the migration at the setpoint (or its --percentile), never above
--max-rate (default the profile's) — from the first byte. --profile names the
loop's tuning: a built-in profile (sluice, the default and what the benchmarks
measure; slacker, the paper's) or a YAML/JSON file naming a base and the
fields it changes (docs/control.md). Without --setpoint, --rate caps the copy
(default unlimited); change it later with sluice migration rate.

--hold-deadline is how long the handover waits for the tenant's open
transactions (default ` + migration.DefaultHoldDeadline.String() + `): every client of the
tenant waits at most about that long plus the handover itself; a transaction
still open then is ended — its session terminated (FATAL 57P01) if idle inside
a transaction block, its statement cancelled otherwise.

--deadline rolls the migration back if it has not handed over in time; the
source then serves on as if nothing happened. Interrupting the command stops
following; the migration carries on.`,
		Example: `  sluice migrate --tenant 1 --to b --setpoint 40ms
  sluice migrate --tenant 1 --to b --setpoint 40ms --max-rate 200MB/s --profile tuned.yaml
  sluice migrate --tenant 1 --to b --rate 20MB/s --deadline 1h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := migrateRequest(cmd, migrateFlags{tenant: tenant, to: to, rate: rate, mode: mode, catchUpTimeout: catchUpTimeout,
				checkpoint: checkpoint, walRelay: walRelay, deadline: deadline, holdDeadline: holdDeadline, setpoint: setpoint, percentile: percentile, maxRate: maxRate, profile: profile})
			if err != nil {
				return err
			}
			c, err := agentClient(agentURL)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			m, err := c.StartMigration(ctx, req)
			if err != nil {
				return agentErr("migrate", err)
			}
			errw := cmd.ErrOrStderr()
			if !asJSON {
				fmt.Fprintf(errw, "migration %s: tenant %d from %s to %s (%s, %s)\n", m.ID, tenant, c.URL(), m.Peer, req.Mode, pacingText(req))
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
	f.StringVar(&agentURL, "agent", "", "source agent API URL (default $SLUICE_AGENT or "+defaultAgentURL+")")
	f.Int64Var(&tenant, "tenant", 0, "tenant id to move")
	f.StringVar(&to, "to", "", "target agent: a peer name of the source agent, or its URL")
	f.StringVar(&setpoint, "setpoint", "", "latency to hold during the migration, e.g. 40ms: the control loop sets the copy's speed")
	f.StringVar(&percentile, "percentile", "mean", "what the setpoint holds: mean, p95 or p99 of each window")
	f.StringVar(&maxRate, "max-rate", "", "with --setpoint: the copy's top speed, e.g. 200MB/s (default: the profile's, 120MB/s)")
	f.StringVar(&profile, "profile", control.DefaultProfileName, "with --setpoint: the control loop's tuning, sluice or slacker, or a YAML/JSON profile file")
	f.StringVar(&rate, "rate", "", "without --setpoint: a fixed cap on the copy, e.g. 20MB/s, at least 64KiB/s (default unlimited)")
	f.StringVar(&deadline, "deadline", "", "roll back if not handed over within this long, e.g. 2h (default none)")
	f.StringVar(&mode, "mode", "live", "live or stop-and-copy")
	f.StringVar(&checkpoint, "checkpoint", "fast", "how the snapshot's checkpoint writes the source's dirty buffers: fast (at once), spread (the server's own pacing), or a pace such as 3s (up to 27s)")
	f.StringVar(&walRelay, "wal-relay", "target", "which agent relays and paces the standby's WAL stream: target (the source's CPU pays only its walsender) or source")
	f.StringVar(&holdDeadline, "hold-deadline", "", "how long the handover waits for the tenant's open transactions before ending them (57P01, or a cancel), e.g. 500ms; every client waits that long (default "+migration.DefaultHoldDeadline.String()+")")
	f.StringVar(&catchUpTimeout, "catch-up-timeout", "", "how long catch-up may take before the migration rolls back, e.g. 30m (default 10m)")
	f.BoolVar(&asJSON, "json", false, "print one final JSON object instead of progress and summary")
	f.BoolVar(&detach, "detach", false, "start the migration and return at once")
	addAgentAuthFlags(f)
	root.AddCommand(cmd)
}

// migrateFlags are `sluice migrate`'s flags that shape the request.
type migrateFlags struct {
	tenant                                               int64
	to, rate, mode, catchUpTimeout, checkpoint, walRelay string
	deadline, setpoint, percentile, maxRate, profile     string
	holdDeadline                                         string
}

// migrateRequest checks the flags and builds the migration's request; every
// mistake is a usage error naming its flag. The request's own rules are
// client.StartMigration.Validate's; this adds only what flags alone can get
// wrong (a rate of 0, a rate with a setpoint, a control flag without one).
func migrateRequest(cmd *cobra.Command, f migrateFlags) (client.StartMigration, error) {
	req := client.StartMigration{Tenant: f.tenant, To: f.to, Mode: f.mode, Checkpoint: f.checkpoint, WALRelay: f.walRelay, CatchUpTimeout: f.catchUpTimeout, HoldDeadline: f.holdDeadline, Deadline: f.deadline}
	switch {
	case f.tenant <= 0:
		return req, cli.Usagef("migrate: --tenant ID is required (a positive integer)")
	case f.to == "":
		return req, cli.Usagef("migrate: --to AGENT is required")
	}
	if f.rate != "" {
		v, err := units.ParseRate(f.rate)
		switch {
		case err != nil:
			return req, cli.Usagef("migrate: --rate: %v", err)
		case v == 0:
			return req, cli.Usagef("migrate: --rate 0 would never finish; omit it for unlimited")
		case f.setpoint != "":
			return req, cli.Usagef("migrate: --rate fixes the speed and --setpoint lets the control loop set it; give one (--max-rate caps the loop)")
		case !math.IsInf(v, 1):
			req.Rate = v
		}
	}
	if f.setpoint == "" {
		for _, name := range []string{"max-rate", "percentile", "profile"} {
			if cmd.Flags().Changed(name) {
				return req, cli.Usagef("migrate: --%s goes with --setpoint (the control loop)", name)
			}
		}
	} else {
		ctl, err := controlFlags(f)
		if err != nil {
			return req, err
		}
		req.Control = ctl
	}
	if err := req.Validate(); err != nil {
		var fe *client.FieldError
		if errors.As(err, &fe) {
			if flag, ok := fieldFlags[fe.Field]; ok {
				return req, cli.Usagef("migrate: %s %s", flag, fe.Msg)
			}
		}
		return req, cli.Usagef("migrate: %v", err)
	}
	return req, nil
}

// fieldFlags names the flag that sets each request field.
var fieldFlags = map[string]string{
	"rate": "--rate", "mode": "--mode", "checkpoint": "--checkpoint", "wal_relay": "--wal-relay", "catch_up_timeout": "--catch-up-timeout",
	"hold_deadline": "--hold-deadline",
	"deadline":      "--deadline", "control.setpoint_ms": "--setpoint", "control.stat": "--percentile",
	"control.max_rate": "--max-rate", "control.profile": "--profile",
}

// controlFlags is the control loop's spec the flags ask for.
func controlFlags(f migrateFlags) (*client.Control, error) {
	sp, err := time.ParseDuration(f.setpoint)
	if err != nil || sp <= 0 {
		return nil, cli.Usagef("migrate: --setpoint %q: want a positive duration such as 40ms", f.setpoint)
	}
	ctl := &client.Control{SetpointMs: float64(sp) / float64(time.Millisecond), Stat: f.percentile}
	prof, err := cli.Profile(f.profile)
	if err != nil {
		return nil, cli.Usagef("migrate: --profile: %v", err)
	}
	if ctl.Profile, err = json.Marshal(prof); err != nil {
		return nil, err
	}
	ctl.MaxRate = prof.MaxRate
	if f.maxRate != "" {
		v, err := units.ParseRate(f.maxRate)
		if err != nil || v <= 0 || math.IsInf(v, 0) {
			return nil, cli.Usagef("migrate: --max-rate %q: want a positive finite rate such as 200MB/s", f.maxRate)
		}
		ctl.MaxRate = v
	}
	return ctl, nil
}

// pacingText says how a migration request paces its copy.
func pacingText(req client.StartMigration) string {
	if c := req.Control; c != nil {
		var p control.Profile
		json.Unmarshal(c.Profile, &p)
		return fmt.Sprintf("control loop: %s %.1f ms, up to %s, profile %s", c.Stat, c.SetpointMs, units.FormatRate(c.MaxRate), p.Label())
	}
	return "rate " + units.FormatRate(limiterRateCLI(req.Rate))
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
	if p.Paused {
		b.WriteString("  PAUSED (sluice migration resume)")
	}
	if p.Warning != "" {
		fmt.Fprintf(&b, "  warning: %s", p.Warning)
	}
	if p.Waiting != "" {
		fmt.Fprintf(&b, "  stuck: %s", p.Waiting)
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
	addAgentAuthFlags(mc.PersistentFlags())

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
		Long: `Change a running migration's copy rate at once: RATE is a byte rate such as
50MB/s or 512KiB/s, at least 64KiB/s (slower would stall the copy; abort it
instead), or unlimited. With a control loop, the loop sets the rate again at
its next step.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := rateArg(args[1])
			if err != nil {
				return err
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
	pauseCmd := func(use, short string, do func(c *client.Client, cmd *cobra.Command, id string) (client.Migration, error)) *cobra.Command {
		return &cobra.Command{
			Use:   use + " ID",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := agentClient(agentURL)
				if err != nil {
					return err
				}
				m, err := do(c, cmd, args[0])
				if err != nil {
					return agentErr("migration "+use, err)
				}
				if asJSON {
					return cli.WriteJSON(cmd.OutOrStdout(), m)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", m.ID, progressLine(m))
				return nil
			},
		}
	}
	pause := pauseCmd("pause", "Hold a running migration's copy at rate 0 until resumed (prepare and snapshot only)",
		func(c *client.Client, cmd *cobra.Command, id string) (client.Migration, error) {
			return c.PauseMigration(cmd.Context(), id)
		})
	resume := pauseCmd("resume", "Let a paused migration's copy go on at the rate its controller or operator set",
		func(c *client.Client, cmd *cobra.Command, id string) (client.Migration, error) {
			return c.ResumeMigration(cmd.Context(), id)
		})
	rate.SetFlagErrorFunc(rateFlagError)
	mc.AddCommand(list, show, rate, pause, resume, abort)
	root.AddCommand(mc)
}

// rateArg checks `sluice migration rate`'s RATE and returns it as the API's
// rate, bytes/s (0 = unlimited); a mistake is a usage error.
func rateArg(arg string) (float64, error) {
	v, err := units.ParseRate(arg)
	switch {
	case err != nil:
		return 0, cli.Usagef("migration rate: %v", err)
	case v == 0:
		return 0, cli.Usagef("migration rate: 0 would stall the copy; use abort to stop it")
	case math.IsInf(v, 1):
		return 0, nil // the API's unlimited
	}
	if err := (client.SetRate{Rate: v}).Validate(); err != nil {
		return 0, cli.Usagef("migration rate: %s is under the least rate, 64KiB/s: the copy would stall; use abort to stop it", arg)
	}
	return v, nil
}

// rateFlagError is `sluice migration rate`'s flag error: a negative RATE
// (-1MB/s, which pflag reads as shorthand flags) is refused by rateArg as the
// rate it is, not as an unknown flag.
func rateFlagError(_ *cobra.Command, err error) error {
	var ne *pflag.NotExistError
	if errors.As(err, &ne) {
		if s := ne.GetSpecifiedShortnames(); s != "" && strings.ContainsRune("0123456789.", rune(s[0])) {
			if _, err := rateArg("-" + s); err != nil {
				return err
			}
		}
	}
	return cli.UsageError{Msg: err.Error()}
}
