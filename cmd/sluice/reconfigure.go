package main

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
)

// reconfigureFlags are `keyspace reconfigure`'s own flags.
type reconfigureFlags struct {
	plan, method, setpoint, percentile, maxRate, chunk, rate string
	subPlans                                                 int
	status, detach                                           bool
}

func keyspaceReconfigureCmd(f *keyspaceFlags) *cobra.Command {
	var rf reconfigureFlags
	cmd := &cobra.Command{
		Use:   "reconfigure NAME --plan FILE [--setpoint 40ms | --method M]",
		Short: "Apply a new partition plan while transactions run (Squall): switch first, then move the data",
		Long: `Applies a new partition plan to a keyspace live. The plan is diffed against the
current one into moving key ranges, cut into chunks (8 MB by default) and grouped in
sub-plans; every proxy of the keyspace holds new transactions for an instant while
the sources fence what they give away, and switches to the new plan. From then on a
transaction whose keys have not arrived at their new partition waits while their
chunk is pulled (a reactive pull, only that transaction waits); the rest is pulled
in the background at the method's pace and deleted from the sources.

Methods: controlled (the default: the control loop paces the pulls to hold the
clients' latency at --setpoint), squall (Squall's fixed pace: a chunk every 200 ms),
reactive (pulls only what transactions touch: it never finishes on its own),
zephyr (reactive plus fixed-pace pulls, no splitting or sub-plans), stop-and-copy
(every moving range copied at once while its transactions wait), paced (pulls at
--rate, which a later --method paced --rate changes; how a migration plan paces
its key-range moves).

It prints progress until done (phase, chunks, bytes, rate, ETA, latency against the
setpoint); --detach returns once started, --status shows the current or last one.
Without --plan, --method (and --setpoint) change the running reconfiguration's pace,
e.g. to finish a reactive one.
A plan that is not valid, that would strand data, or a second reconfiguration while
one runs is refused with exit 2 and nothing changes.`,
		Example: `  sluice keyspace reconfigure shop --plan expand.json --setpoint 40ms
  sluice keyspace reconfigure shop --plan expand.json --method squall --json
  sluice keyspace reconfigure shop --status`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runReconfigure(cmd, f, rf, args[0]) },
	}
	fl := cmd.Flags()
	fl.StringVar(&rf.plan, "plan", "", `the new plan as JSON, {"table": {"partition": "[lo,hi)"}}`)
	fl.StringVar(&rf.method, "method", "", "controlled (default), squall, reactive, zephyr, stop-and-copy or paced")
	fl.StringVar(&rf.rate, "rate", "", "method paced's pace, e.g. 20MB/s, or unlimited")
	fl.StringVar(&rf.setpoint, "setpoint", "", "latency to hold while data moves, e.g. 40ms (method controlled)")
	fl.StringVar(&rf.percentile, "percentile", "mean", "what the setpoint holds: mean, p95 or p99")
	fl.StringVar(&rf.maxRate, "max-rate", "", "top speed of the pulls, e.g. 100MB/s (default: the control profile's)")
	fl.StringVar(&rf.chunk, "chunk", "", "chunk size (default 8MB, Squall's)")
	fl.IntVar(&rf.subPlans, "sub-plans", 0, "least number of sub-plans, 1 to 20 (default 5)")
	fl.BoolVar(&rf.status, "status", false, "show the keyspace's reconfiguration in progress, or its last one")
	fl.BoolVar(&rf.detach, "detach", false, "return once it has started")
	return cmd
}

func reconfigureRequest(rf reconfigureFlags) (client.ReshardRequest, error) {
	var req client.ReshardRequest
	switch {
	case rf.plan != "":
		plan, err := readPlan(rf.plan)
		if err != nil {
			return req, cli.Usagef("keyspace reconfigure: --plan %v", err)
		}
		req.Plan = plan
	case rf.method == "" && rf.setpoint == "":
		return req, cli.Usagef("keyspace reconfigure: --plan FILE is required (or --status, or --method/--setpoint to change the running one's pace)")
	case rf.chunk != "" || rf.subPlans != 0:
		return req, cli.Usagef("keyspace reconfigure: --chunk and --sub-plans shape a new reconfiguration: give --plan")
	}
	req.Method, req.SubPlans = rf.method, rf.subPlans
	if rf.setpoint != "" {
		sp, err := time.ParseDuration(rf.setpoint)
		if err != nil || sp <= 0 {
			return req, cli.Usagef("keyspace reconfigure: --setpoint %q: want a positive duration such as 40ms", rf.setpoint)
		}
		req.Control = &client.Control{SetpointMs: float64(sp) / float64(time.Millisecond), Stat: rf.percentile}
		if rf.maxRate != "" {
			v, err := units.ParseRate(rf.maxRate)
			if err != nil || v <= 0 || math.IsInf(v, 0) {
				return req, cli.Usagef("keyspace reconfigure: --max-rate %q: want a positive finite rate such as 100MB/s", rf.maxRate)
			}
			req.Control.MaxRate = v
		}
	} else if rf.maxRate != "" {
		return req, cli.Usagef("keyspace reconfigure: --max-rate needs --setpoint (the control loop's top speed)")
	}
	if rf.rate != "" {
		if rf.method != client.MethodPaced {
			return req, cli.Usagef("keyspace reconfigure: --rate is method paced's pace: give --method paced")
		}
		if rf.rate == "unlimited" {
			req.Rate = -1
		} else if v, err := units.ParseRate(rf.rate); err != nil || v < client.MinRate || math.IsInf(v, 0) {
			return req, cli.Usagef("keyspace reconfigure: --rate %q: want a rate such as 20MB/s (at least 64 KiB/s), or unlimited", rf.rate)
		} else {
			req.Rate = v
		}
	} else if rf.method == client.MethodPaced {
		return req, cli.Usagef("keyspace reconfigure: method paced needs --rate")
	}
	if rf.chunk != "" {
		v, err := units.ParseBytes(rf.chunk)
		if err != nil || v <= 0 {
			return req, cli.Usagef("keyspace reconfigure: --chunk %q: want a size such as 8MB", rf.chunk)
		}
		req.ChunkBytes = v
	}
	return req, nil
}

func runReconfigure(cmd *cobra.Command, f *keyspaceFlags, rf reconfigureFlags, name string) error {
	out := cmd.OutOrStdout()
	var req client.ReshardRequest
	if !rf.status {
		var err error
		if req, err = reconfigureRequest(rf); err != nil {
			return err
		}
	}
	c, err := agentClient(f.agentURL)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	var st client.ReshardStatus
	if rf.plan == "" && (rf.method != "" || rf.setpoint != "") {
		pace := client.ReshardPace{Method: req.Method, Control: req.Control, Rate: req.Rate}
		if st, err = c.SetReshardPace(ctx, name, pace); err != nil {
			return agentErr("keyspace reconfigure", err)
		}
		return printReshard(out, st, f.asJSON)
	}
	if rf.status {
		st, err = c.ReshardStatus(ctx, name, false)
		if err != nil {
			return agentErr("keyspace reconfigure --status", err)
		}
		return printReshard(out, st, f.asJSON)
	}
	if st, err = c.Reshard(ctx, name, req); err != nil {
		return agentErr("keyspace reconfigure", err)
	}
	if !f.asJSON {
		fmt.Fprintf(out, "reconfiguration %s of keyspace %s: %d chunks, %s, method %s; epoch %d → %d\n", st.ID, name,
			st.Progress.Chunks, units.FormatBytes(float64(st.Progress.Bytes)), st.Method, st.FromEpoch, st.ToEpoch)
	}
	for !rf.detach && (st.Phase == client.PhasePreparing || st.Phase == client.PhaseSwitching || st.Phase == client.PhaseMoving) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		next, err := c.ReshardStatus(ctx, name, false)
		if err != nil {
			return fmt.Errorf("keyspace reconfigure: following %s: %w", st.ID, err)
		}
		st = next
		if !f.asJSON && st.Phase == client.PhaseMoving {
			fmt.Fprintln(out, reshardLine(st))
		}
	}
	if err := printReshard(out, st, f.asJSON); err != nil {
		return err
	}
	if st.Phase == client.PhaseFailed {
		return fmt.Errorf("keyspace reconfigure: %s rolled back: %s", st.ID, st.Error)
	}
	return nil
}

// progressLine is one line of a moving reconfiguration's progress.
func reshardLine(st client.ReshardStatus) string {
	p := st.Progress
	s := fmt.Sprintf("  %s  sub-plan %d/%d  chunks %d/%d  %s of %s", st.Phase, min(p.SubPlan+1, p.SubPlans), p.SubPlans,
		p.Complete, p.Chunks, units.FormatBytes(float64(p.BytesDone)), units.FormatBytes(float64(p.Bytes)))
	switch {
	case st.Rate < 0:
		s += "  rate unlimited"
	case st.Rate > 0:
		s += "  rate " + units.FormatRate(st.Rate)
	}
	if st.ETASeconds > 0 {
		s += fmt.Sprintf("  eta %.0fs", st.ETASeconds)
	}
	if st.SetpointMs > 0 && st.LatencyMs >= 0 {
		s += fmt.Sprintf("  latency %.1fms (setpoint %.0fms)", st.LatencyMs, st.SetpointMs)
	}
	return s + fmt.Sprintf("  reactive pulls %d", st.ReactivePulls)
}

func printReshard(out io.Writer, st client.ReshardStatus, asJSON bool) error {
	if asJSON {
		return cli.WriteJSON(out, st)
	}
	took := "-"
	if !st.Finished.IsZero() {
		took = st.Finished.Sub(st.Started).Round(time.Millisecond).String()
	}
	fmt.Fprintf(out, "reconfiguration %s of keyspace %s: %s (method %s, epoch %d → %d)\n", st.ID, st.Keyspace, st.Phase, st.Method, st.FromEpoch, st.ToEpoch)
	fmt.Fprintf(out, "  switch hold %.1f ms, took %s, chunks %d/%d arrived, %d cleaned, %s copied, %d reactive and %d asynchronous pulls\n",
		st.SwitchMs, took, st.Progress.Complete, st.Progress.Chunks, st.Progress.Cleaned, units.FormatBytes(float64(st.BytesCopied)), st.ReactivePulls, st.AsyncPulls)
	if st.Error != "" {
		fmt.Fprintf(out, "  error: %s\n", st.Error)
	}
	return nil
}
