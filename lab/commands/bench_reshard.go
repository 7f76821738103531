package commands

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/experiment"
	"github.com/sluicedb/sluice/lab/testbed"
)

// benchReshardFlags are bench reshard's flags.
type benchReshardFlags struct {
	o              experiment.ReshardOptions
	methods        string
	move, chunk    string
	setpoint       string
	settings       []string
	cpus           float64
	memoryMB       int
	quick, jsonOut bool
	outSet         bool
}

func init() {
	var bf benchReshardFlags
	d := experiment.ReshardDefaults()
	cmd := &cobra.Command{
		Use:   "reshard --scenario loadbalance|expand|consolidate [--workload ycsb|tpcc] [--json]",
		Short: "Squall §7 on this machine: a keyspace reconfigured live by each method, throughput and p99 per second",
		Long: `Starts one cgroup-limited server (a sluice agent, --cpus and --memory) per
partition (or one for all with --one-server) and a proxy that follows the
agents' catalogs, creates a tenant per partition, and for each method (stop-and-copy, squall, zephyr, controlled,
reactive; --methods) on a freshly loaded keyspace (same data, same seed):
runs a closed-loop workload (--workload ycsb or tpcc, --mpl connections)
through the proxy's keyspace router, requests the scenario's new plan after
--before with that method (client.Reshard; the first server's agent drives it),
follows it to done, runs --after more, stops the workload, checks its ledger
row by row and the keyspace's placement (client.CheckKeyspace).

Scenarios (Squall §7, scaled): loadbalance — 3 partitions, the hot range (YCSB's
hot set, TPC-C's first quarter of the warehouses), all on p1, spread over the
three; expand — 3 → 4, the empty p4 takes a share of every old partition;
consolidate — 4 → 3, p4's range given to the others. --move sizes YCSB's data so
the change moves about that much; TPC-C's size is --warehouses (a multiple of
12) × --customers.

A method not done after its bound (--bound, or 3 × the longest earlier method,
at least --min-bound; pure reactive never finishes on its own) is reported
cut there (finished false); the workload then stops and every chunk not yet
moved is pulled on request (client.ReshardPull) before the checks.

Prints scenario, workload and methods (method, reconfig_seconds, pre_tps,
mean_tps_during, min_tps_1s, zero_commit_seconds, p99_ms_before, p99_ms_during,
writes_acknowledged, writes_missing, writes_duplicated, and more) with --json,
else the Markdown report. Writes series.csv, status.csv, summary.json, report.md
and reshard.png into --out. Exits 1 if a ledger or keyspace check fails; goals
are reported, not asserted. Needs root (cgroups).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bf.outSet = cmd.Flags().Changed("out")
			return runBenchReshard(cmd, bf)
		},
	}
	f := cmd.Flags()
	f.StringVar(&bf.o.Scenario, "scenario", "", "loadbalance, expand or consolidate (required)")
	f.StringVar(&bf.o.Workload, "workload", d.Workload, "ycsb or tpcc")
	f.StringVar(&bf.methods, "methods", strings.Join(d.Methods, ","), "methods to run, in this order, comma-separated")
	f.StringVar(&bf.move, "move", fmt.Sprintf("%dMB", d.MoveBytes/1e6), "YCSB: size the data so the change moves about this much")
	f.IntVar(&bf.o.Warehouses, "warehouses", d.Warehouses, "TPC-C: warehouses (a multiple of 12)")
	f.IntVar(&bf.o.Customers, "customers", d.Customers, "TPC-C: customers a district")
	f.IntVar(&bf.o.MPL, "mpl", d.MPL, "workload connections (closed loop)")
	f.Float64Var(&bf.o.ReadFraction, "read-fraction", d.ReadFraction, "YCSB: share of reads")
	f.DurationVar(&bf.o.Before, "before", d.Before, "workload before the change is requested")
	f.DurationVar(&bf.o.After, "after", d.After, "workload after the change is done")
	f.DurationVar(&bf.o.Bound, "bound", 0, "cut every method after this (0: 3 × the longest earlier method, at least --min-bound)")
	f.DurationVar(&bf.o.MinBound, "min-bound", d.MinBound, "the least bound when --bound is 0")
	f.DurationVar(&bf.o.FinishWait, "finish-wait", d.FinishWait, "after a cut, how long the re-requested change may take")
	f.StringVar(&bf.setpoint, "setpoint", "", "controlled's p99 setpoint (e.g. 40ms); default 1.25 × the p99 before the change")
	f.StringVar(&bf.chunk, "chunk", "", "chunk size (default the driver's, 8 MiB)")
	f.Uint64Var(&bf.o.Seed, "seed", d.Seed, "data and workload seed")
	f.Float64Var(&bf.cpus, "cpus", 0.4, "each server's CPU quota, cores (negative: no cap)")
	f.IntVar(&bf.memoryMB, "memory", 1024, "each server's memory cap, MiB, page cache included (negative: no cap)")
	f.BoolVar(&bf.o.OneServer, "one-server", false, "every partition's tenant on one server (give it --cpus and --memory for all)")
	f.StringArrayVar(&bf.settings, "tenant-setting", nil, "a postgresql.conf parameter for every tenant, name=value (repeatable; over the bed's own)")
	f.BoolVar(&bf.quick, "quick", false, "a small run for tests and CI: 8 MB moved (YCSB), 12 warehouses of 300 customers, 8 s before, 3 s after, bounds of 60 s")
	f.StringVar(&bf.o.Out, "out", "", "output directory (default out/bench/reshard-SCENARIO-WORKLOAD)")
	f.BoolVar(&bf.jsonOut, "json", false, "print the result as JSON")
	benchCmd.AddCommand(cmd)
}

// parse turns the flags into the experiment's options and the bed's.
func (bf *benchReshardFlags) parse() (testbed.Options, error) {
	usage := func(format string, args ...any) error { return cli.Usagef("bench reshard: "+format, args...) }
	o := &bf.o
	if bf.quick {
		bf.move, o.Customers, o.Before, o.After = "8MB", 300, 8*time.Second, 3*time.Second
		o.MinBound, o.FinishWait = 60*time.Second, 2*time.Minute
	}
	mv, err := units.ParseBytes(bf.move)
	if err != nil {
		return testbed.Options{}, usage("--move: %v", err)
	}
	o.MoveBytes = mv
	if bf.chunk != "" {
		if o.ChunkBytes, err = units.ParseBytes(bf.chunk); err != nil || o.ChunkBytes <= 0 {
			return testbed.Options{}, usage("--chunk %q: want a positive size such as 8MB", bf.chunk)
		}
	}
	if bf.setpoint != "" {
		if o.SetpointMs, err = parseMs(bf.setpoint); err != nil || !(o.SetpointMs > 0) {
			return testbed.Options{}, usage("--setpoint %q: want a positive duration such as 40ms", bf.setpoint)
		}
	}
	o.Methods = nil
	for _, m := range strings.Split(bf.methods, ",") {
		if m = strings.TrimSpace(m); m != "" {
			o.Methods = append(o.Methods, m)
		}
	}
	if o.Out == "" {
		o.Out = filepath.Join("out", "bench", "reshard-"+o.Scenario+"-"+o.Workload)
	}
	o.Command = "sluice " + strings.Join(os.Args[1:], " ")
	if err := o.Check(); err != nil {
		return testbed.Options{}, usage("%v", err)
	}
	servers, _ := experiment.ReshardServers(o.Scenario, o.OneServer)
	// The proxy is a process of its own: its CPU and memory are not the
	// bench's, and a proxy that wedges cannot keep the bench from ending.
	bo := testbed.Options{Servers: servers, CPUs: bf.cpus, MemoryMB: bf.memoryMB, CPUShares: benchCPUShares, ProxyProcess: true,
		FollowCatalogs: true, Settings: map[string]string{"max_prepared_transactions": "50"}}
	for _, kv := range bf.settings {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || !settingName.MatchString(k) || v == "" {
			return bo, usage("--tenant-setting %q: want name=value, e.g. autovacuum=off", kv)
		}
		bo.Settings[k] = v
	}
	if err := bo.Check(); err != nil {
		return bo, usage("%v", err)
	}
	return bo, nil
}

func runBenchReshard(cmd *cobra.Command, bf benchReshardFlags) error {
	bo, err := bf.parse()
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("bench reshard: needs root (cgroup v1 groups for the servers; PostgreSQL runs as the postgres user)")
	}
	o := bf.o
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return fmt.Errorf("bench reshard: %w", err)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	progress := func(format string, args ...any) {
		fmt.Fprintf(cmd.ErrOrStderr(), "bench reshard: "+format+"\n", args...)
	}
	o.Progress, bo.Progress = progress, progress
	bo.LogDir = filepath.Join(o.Out, "agents")
	bed, err := testbed.Start(ctx, bo)
	if err != nil {
		return err
	}
	defer bed.Close()
	res, err := experiment.Reshard(ctx, bed, o)
	if errors.Is(err, experiment.ErrReshardNotBuilt) {
		return fmt.Errorf("bench reshard: %w", err)
	}
	if err != nil {
		return err
	}
	if bf.jsonOut {
		err = cli.WriteJSON(cmd.OutOrStdout(), res)
	} else {
		err = printFile(cmd.OutOrStdout(), filepath.Join(o.Out, experiment.ReportFile))
	}
	if err == nil && !res.OK() {
		return fmt.Errorf("bench reshard: a ledger or keyspace check failed (see %s)", filepath.Join(o.Out, experiment.ReportFile))
	}
	return err
}

func printFile(w io.Writer, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
