package commands

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/experiment"
	"github.com/sluicedb/sluice/lab/sim"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/plan"
)

// benchPlanFlags are bench plan's flags.
type benchPlanFlags struct {
	o              experiment.PlanBenchOptions
	size, contract string
	methods        string
	cpus           float64
	memoryMB       int
	jsonOut        bool
}

func init() {
	var bf benchPlanFlags
	cmd := &cobra.Command{
		Use:   "plan [--json]",
		Short: "Aqueduct §5 on this machine: a plan of six moves by each method, per-store latency against contracts",
		Long: `Starts four cgroup-limited servers (sluice agents, --cpus and --memory each) and a
proxy. Servers a, b and c hold two moving stores and one fixed store each (a store
is a tenant with --size of YCSB data and its own workload through the proxy, --tps
arrivals per second); d holds the alone store, on a server no migration touches.
It measures every store without migration (the contract, --contract, defaults to
the larger of twice the highest store mean and 1.25 × the 95th percentile of the
stores' 3 s window means), profiles the plant's gain (sluice tune --live's
method: one moving store migrated at fixed rates and rolled back; K = (1-p)/G for
--pole), then runs, for each method (--methods), a plan of six moves rotating the
moving stores among a, b and c (the next method moves them back), driven by
server a's agent (sluice plan apply), with every workload running; after each it
checks every store's ledger row by row.

Methods: whole-store (unthrottled), sub-store (sub-moves at the control profile's
top speed, no control), integral (Aqueduct's controller on the worst store),
pid (Slacker's PID on the worst store).

Prints servers, stores, contract_ms, k and methods (method, plan_seconds,
worst_violation_fraction, worst_avl_fraction — AVL as a fraction of the contract,
negative = under it —, fixed_store_p99_ms, alone_store_p99_ms, throughput_fraction,
writes_missing, writes_duplicated, per store figures) with --json, else the
Markdown report. Writes summary.json, methods.csv, stores.csv, series.csv,
windows.csv, plan-METHOD.png and report.md into --out. Exits 1 if a ledger check
fails; goals are reported, not asserted. Needs root (cgroups).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchPlan(cmd, bf) },
	}
	f := cmd.Flags()
	f.StringVar(&bf.size, "size", "48MB", "YCSB data per store")
	f.Float64Var(&bf.o.Rate, "tps", 12, "each store's arrivals per second")
	f.IntVar(&bf.o.MPL, "mpl", 4, "each store's connections")
	f.StringVar(&bf.contract, "contract", "", "every store's latency contract (e.g. 20ms); default the larger of 2 × the highest store mean and 1.25 × the 95th percentile of the stores' 3 s window means, without migration")
	f.StringVar(&bf.methods, "methods", strings.Join([]string{plan.MethodWholeStore, plan.MethodSubStore, plan.MethodIntegral, plan.MethodPID}, ","), "methods, in order, comma-separated")
	f.Float64Var(&bf.o.K, "k", 0, "the integral gain, (bytes/s) per second of error; 0 = profiled on the bed")
	f.Float64Var(&bf.o.Pole, "pole", sim.DefaultPole, "the integral loop's pole for the profiled K")
	f.Uint64Var(&bf.o.Seed, "seed", 1, "data and workload seed")
	f.Float64Var(&bf.cpus, "cpus", 0.3, "each server's CPU quota, cores (negative: no cap)")
	f.IntVar(&bf.memoryMB, "memory", 512, "each server's memory cap, MiB, page cache included (negative: no cap)")
	f.StringVar(&bf.o.Out, "out", filepath.Join("out", "bench", "plan"), "output directory")
	f.BoolVar(&bf.jsonOut, "json", false, "print the result as JSON")
	benchCmd.AddCommand(cmd)
}

func runBenchPlan(cmd *cobra.Command, bf benchPlanFlags) error {
	usage := func(format string, args ...any) error { return cli.Usagef("bench plan: "+format, args...) }
	o := bf.o
	sz, err := units.ParseBytes(bf.size)
	if err != nil || sz < 1e6 {
		return usage("--size %q: want a size of at least 1MB such as 48MB", bf.size)
	}
	o.StoreBytes = sz
	if bf.contract != "" {
		if o.ContractMs, err = parseMs(bf.contract); err != nil || !(o.ContractMs > 0) {
			return usage("--contract %q: want a positive duration such as 20ms", bf.contract)
		}
	}
	o.Methods = nil
	for _, m := range strings.Split(bf.methods, ",") {
		if m = strings.TrimSpace(m); m != "" {
			o.Methods = append(o.Methods, m)
		}
	}
	for _, m := range o.Methods {
		if !slices.Contains(plan.Methods, m) {
			return usage("--methods: unknown method %q (want %s)", m, strings.Join(plan.Methods, ", "))
		}
	}
	if !(o.Rate > 0) || o.MPL < 1 || o.K < 0 || !(o.Pole > -1 && o.Pole < 1) {
		return usage("--tps must be > 0, --mpl >= 1, --k >= 0 and --pole in (-1, 1)")
	}
	bo := testbed.Options{Servers: experiment.PlanBenchServers, CPUs: bf.cpus, MemoryMB: bf.memoryMB, CPUShares: benchCPUShares, ProxyProcess: true}
	if err := bo.Check(); err != nil {
		return usage("%v", err)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("bench plan: needs root (cgroup v1 groups for the servers; PostgreSQL runs as the postgres user)")
	}
	o.Command = "sluice " + strings.Join(os.Args[1:], " ")
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return fmt.Errorf("bench plan: %w", err)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	progress := func(format string, args ...any) {
		fmt.Fprintf(cmd.ErrOrStderr(), "bench plan: "+format+"\n", args...)
	}
	o.Progress, bo.Progress = progress, progress
	bo.LogDir = filepath.Join(o.Out, "agents")
	bed, err := testbed.Start(ctx, bo)
	if err != nil {
		return err
	}
	defer bed.Close()
	res, err := experiment.PlanBench(ctx, bed, o)
	if err != nil {
		return fmt.Errorf("bench plan: %w", err)
	}
	if bf.jsonOut {
		err = cli.WriteJSON(cmd.OutOrStdout(), res)
	} else {
		err = printFile(cmd.OutOrStdout(), filepath.Join(o.Out, experiment.ReportFile))
	}
	for _, m := range res.Methods {
		if err == nil && (m.WritesMissing > 0 || m.WritesDuplicated > 0) {
			err = fmt.Errorf("bench plan: method %s: %d writes missing, %d duplicated", m.Method, m.WritesMissing, m.WritesDuplicated)
		}
	}
	return err
}
