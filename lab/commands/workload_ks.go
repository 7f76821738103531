package commands

import (
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/lab/workload"
)

// ksFlags are the flags both keyspace workloads share.
type ksFlags struct {
	name, file    string
	partitions    []string // NAME=DSN, in plan order
	clients       []string // NAME=DSN
	router        string
	load, noRun   bool
	arr           workload.Arrivals
	asJSON, quiet bool
}

func (f *ksFlags) register(fs *pflag.FlagSet, name string) {
	fs.StringVar(&f.name, "keyspace", name, "the keyspace's name (the database a router client names)")
	fs.StringVar(&f.file, "keyspace-file", "", "a keyspace as JSON (its plan replaces the even split; its tables must be the workload's)")
	fs.StringArrayVar(&f.partitions, "partition", nil, "NAME=DSN of a partition's database, for loading and verification (repeat; the plan splits keys evenly in this order)")
	fs.StringArrayVar(&f.clients, "client", nil, "NAME=DSN transactions use for a partition in direct mode, e.g. the proxy with its tenant alias (repeat; default --partition)")
	fs.StringVar(&f.router, "router", "", "the keyspace router's DSN (sluice proxy, database = keyspace): router mode")
	fs.BoolVar(&f.load, "load", true, "create the schema and load the data first")
	fs.BoolVar(&f.noRun, "load-only", false, "load and stop")
	fs.Float64Var(&f.arr.Rate, "rate", 100, "mean transaction arrivals per second (Poisson, open loop)")
	fs.IntVar(&f.arr.MPL, "mpl", 8, "connections serving the arrival queue")
	fs.DurationVar(&f.arr.Duration, "duration", 30*time.Second, "how long arrivals are generated")
	fs.Uint64Var(&f.arr.Seed, "seed", 1, "seed for data, arrivals and keys")
	fs.BoolVar(&f.asJSON, "json", false, "print only the result, as JSON")
	fs.BoolVar(&f.quiet, "quiet", false, "no per-second lines")
}

// reach parses the DSN flags; parts are the partitions in the order given.
func (f *ksFlags) reach(cmd string) ([]keyspace.Partition, workload.Reach, error) {
	var parts []keyspace.Partition
	r := workload.Reach{Router: f.router}
	pairs := func(flag string, list []string, into map[string]string, order bool) error {
		for _, s := range list {
			name, dsn, ok := strings.Cut(s, "=")
			if !ok || name == "" || dsn == "" {
				return cli.Usagef("%s: --%s %q: want NAME=DSN", cmd, flag, s)
			}
			if _, dup := into[name]; dup {
				return cli.Usagef("%s: --%s: partition %s named twice", cmd, flag, name)
			}
			into[name] = dsn
			if order {
				parts = append(parts, keyspace.Partition{Name: name, Tenant: name})
			}
		}
		return nil
	}
	r.Partitions = map[string]string{}
	if err := pairs("partition", f.partitions, r.Partitions, true); err != nil {
		return nil, r, err
	}
	if len(parts) == 0 {
		return nil, r, cli.Usagef("%s: at least one --partition NAME=DSN is required", cmd)
	}
	if len(f.clients) > 0 {
		if f.router != "" {
			return nil, r, cli.Usagef("%s: --client is for direct mode; not with --router", cmd)
		}
		r.Client = map[string]string{}
		if err := pairs("client", f.clients, r.Client, false); err != nil {
			return nil, r, err
		}
	}
	return parts, r, nil
}

// keyspace returns built, or the keyspace in --keyspace-file if its
// tables are built's.
func (f *ksFlags) keyspace(cmd string, built *keyspace.Keyspace) (*keyspace.Keyspace, error) {
	if f.file == "" {
		return built, nil
	}
	data, err := os.ReadFile(f.file)
	if err != nil {
		return nil, cli.Usagef("%s: --keyspace-file: %v", cmd, err)
	}
	ks, err := keyspace.Decode(data)
	if err != nil {
		return nil, cli.Usagef("%s: --keyspace-file %s: %v", cmd, f.file, err)
	}
	want := map[string]keyspace.Kind{}
	for _, t := range built.Tables {
		want[t.Name] = t.Kind
	}
	for _, t := range ks.Tables {
		if want[t.Name] != t.Kind {
			return nil, cli.Usagef("%s: --keyspace-file %s: table %s is %s there, %q in the workload", cmd, f.file, t.Name, t.Kind, want[t.Name])
		}
		delete(want, t.Name)
	}
	if len(want) > 0 {
		return nil, cli.Usagef("%s: --keyspace-file %s lacks the workload's tables %v", cmd, f.file, slices.Sorted(maps.Keys(want)))
	}
	return ks, nil
}

// each prints a second's line unless quiet or JSON.
func (f *ksFlags) each(out io.Writer) func(workload.Second) {
	if f.asJSON || f.quiet {
		return nil
	}
	fmt.Fprintf(out, "%4s %6s %6s %9s %9s %9s\n", "t", "tps", "errors", "p50_ms", "p95_ms", "p99_ms")
	return func(s workload.Second) {
		fmt.Fprintf(out, "%4d %6d %6d %9.1f %9.1f %9.1f\n", s.T, s.Count, s.Errors, s.P50Ms, s.P95Ms, s.P99Ms)
	}
}

// ksOutput is what a keyspace workload command prints as JSON.
type ksOutput struct {
	Load *workload.LoadStats `json:"load,omitempty"`
	Run  *workload.KSResult  `json:"run,omitempty"`
}

// finish prints the load and the run and fails on a failed verdict.
func (f *ksFlags) finish(out io.Writer, cmd string, ld *workload.LoadStats, res *workload.KSResult) error {
	if f.asJSON {
		if err := cli.WriteJSON(out, ksOutput{Load: ld, Run: res}); err != nil {
			return err
		}
	} else {
		if ld != nil {
			fmt.Fprintf(out, "loaded %v in %.1f s\n", ld.Rows, ld.Seconds)
		}
		if res != nil {
			printKSResult(out, res)
		}
	}
	if res != nil && !res.Verdict.OK() {
		return fmt.Errorf("%s: %s", cmd, res.Verdict)
	}
	return nil
}

func printKSResult(w io.Writer, r *workload.KSResult) {
	fmt.Fprintf(w, "%s, %s mode: %d transactions in %.1f s (%.1f tps), %d errors, %d skipped, %d dropped\n",
		r.Workload, r.Mode, r.Transactions, r.Seconds, r.ThroughputTPS, r.Errors, r.Skipped, r.Dropped)
	fmt.Fprintf(w, "latency ms: p50 %.1f  p95 %.1f  p99 %.1f;  distributed %.1f%% (%d spanning partitions)\n",
		r.P50Ms, r.P95Ms, r.P99Ms, 100*r.DistributedFraction, r.Spanning)
	if len(r.Counts) > 0 {
		fmt.Fprintf(w, "acknowledged:")
		for _, k := range slices.Sorted(maps.Keys(r.Counts)) {
			fmt.Fprintf(w, " %s %d", k, r.Counts[k])
		}
		fmt.Fprintln(w)
	}
	if len(r.ErrorsByCode) > 0 {
		fmt.Fprintf(w, "errors by SQLSTATE:")
		for _, k := range slices.Sorted(maps.Keys(r.ErrorsByCode)) {
			fmt.Fprintf(w, " %s %d", k, r.ErrorsByCode[k])
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, r.Verdict)
	for _, p := range r.Verdict.Problems {
		fmt.Fprintln(w, "  "+p)
	}
}

func newWorkloadYCSBCmd() *cobra.Command {
	var f ksFlags
	var cfg workload.YCSBConfig
	var dist string
	cmd := &cobra.Command{
		Use:   "ycsb --partition NAME=DSN … [--router DSN]",
		Short: "YCSB over a keyspace: load usertable by owner, run open-loop, verify the ledger row by row on every partition",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			parts, reach, err := f.reach("workload ycsb")
			if err != nil {
				return err
			}
			built, err := workload.YCSBKeyspace(f.name, parts, cfg.Records)
			if err != nil {
				return cli.Usagef("workload ycsb: %v", err)
			}
			if cfg.Keyspace, err = f.keyspace("workload ycsb", built); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			var ld *workload.LoadStats
			if f.load {
				st, err := workload.LoadYCSB(ctx, cfg.Keyspace, reach.Partitions, cfg.Records, f.arr.Seed)
				if err != nil {
					return err
				}
				ld = &st
			}
			if f.noRun {
				return f.finish(cmd.OutOrStdout(), "workload ycsb", ld, nil)
			}
			cfg.Arrivals, cfg.Reach, cfg.Distribution = f.arr, reach, workload.Distribution(dist)
			res, err := workload.RunYCSB(ctx, cfg, f.each(cmd.OutOrStdout()))
			if err != nil {
				return err
			}
			return f.finish(cmd.OutOrStdout(), "workload ycsb", ld, &res)
		},
	}
	f.register(cmd.Flags(), "ycsb")
	fs := cmd.Flags()
	fs.Int64Var(&cfg.Records, "records", 100000, "usertable keys [0, N)")
	fs.IntVar(&cfg.OpsPerTx, "ops", 1, "operations per transaction (keys drawn independently: several may span partitions)")
	fs.Float64Var(&cfg.ReadFraction, "read-fraction", 0.5, "share of operations that read (0.5: workload A, 0.95: B)")
	fs.Float64Var(&cfg.InsertFraction, "insert-fraction", 0, "share of writes that insert a new key instead of updating")
	fs.StringVar(&dist, "distribution", "zipfian", "key distribution: uniform, zipfian, hotspot")
	fs.DurationVar(&cfg.HotMove, "hot-move", 0, "hotspot: move the hot fifth of the keys to the next fifth this often (0: never)")
	return cmd
}

func newWorkloadTPCCCmd() *cobra.Command {
	var f ksFlags
	var cfg workload.TPCCConfig
	cmd := &cobra.Command{
		Use:   "tpcc --partition NAME=DSN … [--router DSN]",
		Short: "TPC-C-lite over a keyspace: load warehouses by owner, run new-order/payment/order-status open-loop, verify",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			parts, reach, err := f.reach("workload tpcc")
			if err != nil {
				return err
			}
			built, err := workload.TPCCKeyspace(f.name, parts, cfg.Scale)
			if err != nil {
				return cli.Usagef("workload tpcc: %v", err)
			}
			if cfg.Keyspace, err = f.keyspace("workload tpcc", built); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			var ld *workload.LoadStats
			if f.load {
				st, err := workload.LoadTPCC(ctx, cfg.Keyspace, reach.Partitions, cfg.Scale, f.arr.Seed)
				if err != nil {
					return err
				}
				ld = &st
			}
			if f.noRun {
				return f.finish(cmd.OutOrStdout(), "workload tpcc", ld, nil)
			}
			cfg.Arrivals, cfg.Reach = f.arr, reach
			for _, v := range []*float64{&cfg.RemoteNewOrder, &cfg.RemotePayment} {
				if *v == 0 {
					*v = -1 // the flag's 0 means none; the config's means the default
				}
			}
			res, err := workload.RunTPCC(ctx, cfg, f.each(cmd.OutOrStdout()))
			if err != nil {
				return err
			}
			return f.finish(cmd.OutOrStdout(), "workload tpcc", ld, &res)
		},
	}
	f.register(cmd.Flags(), "tpcc")
	fs := cmd.Flags()
	fs.IntVar(&cfg.Scale.Warehouses, "warehouses", 4, "warehouses (split evenly over the partitions)")
	fs.IntVar(&cfg.Scale.Customers, "customers", 300, "customers per district")
	fs.IntVar(&cfg.Scale.Items, "items", 1000, "items (and stock rows per warehouse)")
	fs.Float64Var(&cfg.RemoteNewOrder, "remote-new-order", 0.10, "share of new-orders with a line from another warehouse (another partition when there is one)")
	fs.Float64Var(&cfg.RemotePayment, "remote-payment", 0.15, "share of payments for another warehouse's customer")
	return cmd
}
