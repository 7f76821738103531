package commands

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/workload"
)

func init() {
	wl := &cobra.Command{
		Use:   "workload",
		Short: "Slacker's transactional YCSB on a tenant, and YCSB and TPC-C-lite on a keyspace: load, run open-loop, verify the ledger",
	}
	wl.AddCommand(newWorkloadLoadCmd(), newWorkloadRunCmd(), newWorkloadVerifyCmd(), newWorkloadYCSBCmd(), newWorkloadTPCCCmd())
	Lab.AddCommand(wl)
}

func newWorkloadLoadCmd() *cobra.Command {
	var dsn, size string
	var seed uint64
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "load --dsn URL --size SIZE",
		Short: "Create usertable and fill it by COPY to about SIZE (e.g. 200MB)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dsn == "" {
				return cli.Usagef("workload load: --dsn is required")
			}
			bytes, err := units.ParseBytes(size)
			if err != nil || bytes == 0 {
				return cli.Usagef("workload load: --size: %s", errOrZero(err, "must be positive"))
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				return fmt.Errorf("workload load: %w", err)
			}
			defer conn.Close(context.Background())
			rows := workload.RowsForSize(bytes)
			start := time.Now()
			res, err := workload.Load(ctx, conn, rows, seed, func(done int64) {
				if !asJSON {
					fmt.Fprintf(cmd.ErrOrStderr(), "\rload: %d/%d rows (%.0f%%)", done, rows, 100*float64(done)/float64(rows))
				}
			})
			if !asJSON {
				fmt.Fprintln(cmd.ErrOrStderr())
			}
			if err != nil {
				return err
			}
			secs := time.Since(start).Seconds()
			if asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), map[string]any{"rows": res.Rows, "bytes": res.Bytes, "seconds": secs})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "loaded %d rows, %s on disk, in %.1f s\n", res.Rows, units.FormatBytes(float64(res.Bytes)), secs)
			return nil
		},
	}
	cmd.Flags().StringVar(&dsn, "dsn", "", "PostgreSQL connection string (the tenant, directly or through the proxy)")
	cmd.Flags().StringVar(&size, "size", "200MB", "approximate table size on disk")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed for the field values")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func newWorkloadRunCmd() *cobra.Command {
	var (
		cfg              workload.Config
		dist, ledgerPath string
		csvPath          string
		latencyListen    string
		asJSON           bool
	)
	cmd := &cobra.Command{
		Use:   "run --dsn URL --rate TPS --duration D",
		Short: "Run open-loop YCSB transactions and print per-second latency and throughput",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.DSN == "" {
				return cli.Usagef("workload run: --dsn is required")
			}
			if _, err := workload.NewKeyChooser(workload.Distribution(dist), 1); err != nil {
				return cli.Usagef("workload run: --distribution: unknown %q (uniform, zipfian, hotspot)", dist)
			}
			cfg.Distribution = workload.Distribution(dist)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			if cfg.Records == 0 {
				// Not given: use the table's size.
				conn, err := pgx.Connect(ctx, cfg.DSN)
				if err != nil {
					return fmt.Errorf("workload run: %w", err)
				}
				err = conn.QueryRow(ctx, "SELECT count(*) FROM "+workload.Table).Scan(&cfg.Records)
				conn.Close(context.Background())
				if err != nil {
					return fmt.Errorf("workload run: counting records (run `sluice workload load` first): %w", err)
				}
			}
			r, err := workload.NewRunner(cfg)
			if err != nil {
				return cli.UsageError{Msg: err.Error()}
			}
			if latencyListen != "" {
				u, stopServe, err := r.ServeWindow(latencyListen, "")
				if err != nil {
					return cli.Usagef("workload run: --latency-listen: %v", err)
				}
				defer stopServe()
				fmt.Fprintf(cmd.ErrOrStderr(), "workload: clients' latency window at %s\n", u)
			}
			var cw *csv.Writer
			if csvPath != "" {
				f, err := os.Create(csvPath)
				if err != nil {
					return fmt.Errorf("workload run: %w", err)
				}
				defer f.Close()
				cw = csv.NewWriter(f)
				defer cw.Flush()
				cw.Write([]string{"t", "count", "errors", "mean_ms", "p50_ms", "p95_ms", "p99_ms", "queue_ms", "rate", "queue_len"})
			}
			out := cmd.OutOrStdout()
			if !asJSON {
				fmt.Fprintf(out, "%4s %6s %6s %9s %9s %9s %9s\n", "t", "tps", "errors", "mean_ms", "p95_ms", "p99_ms", "queue_ms")
			}
			sum, err := r.Run(ctx, func(s workload.Second) {
				if cw != nil {
					cw.Write(secondRecord(s))
				}
				if !asJSON {
					fmt.Fprintf(out, "%4d %6d %6d %9.1f %9.1f %9.1f %9.1f\n", s.T, s.Count, s.Errors, s.MeanMs, s.P95Ms, s.P99Ms, s.QueueMs)
				}
			})
			if ledgerPath != "" {
				if lerr := r.Ledger.Save(ledgerPath); lerr != nil && err == nil {
					err = lerr
				}
			}
			if err != nil && ctx.Err() == nil {
				return err
			}
			if asJSON {
				return cli.WriteJSON(out, sum)
			}
			printSummary(out, sum)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DSN, "dsn", "", "PostgreSQL connection string (normally the sluice proxy)")
	f.Float64Var(&cfg.Rate, "rate", 100, "mean transaction arrivals per second (Poisson, open loop)")
	f.IntVar(&cfg.MPL, "mpl", 8, "multiprogramming level: connections serving the queue")
	f.IntVar(&cfg.OpsPerTx, "ops", 10, "operations per transaction")
	f.Float64Var(&cfg.ReadFraction, "read-fraction", 0.85, "share of operations that read")
	f.StringVar(&dist, "distribution", "zipfian", "key distribution: uniform, zipfian, hotspot")
	f.Int64Var(&cfg.Records, "records", 0, "key space (default: the table's row count)")
	f.DurationVar(&cfg.Duration, "duration", 60*time.Second, "how long arrivals are generated")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed for arrivals and keys")
	f.StringVar(&ledgerPath, "ledger", "", "write the acknowledged ledger ids to this file")
	f.StringVar(&csvPath, "csv", "", "write the per-second series to this CSV file")
	f.StringVar(&latencyListen, "latency-listen", "", "serve the clients' latency over the last 3 s (queue + execution) at http://ADDR/ for `sluice migrate --client-latency`, e.g. 127.0.0.1:7433")
	f.BoolVar(&asJSON, "json", false, "print only the final summary, as JSON")
	return cmd
}

func newWorkloadVerifyCmd() *cobra.Command {
	var dsn, ledgerPath string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "verify --dsn URL --ledger FILE",
		Short: "Check, row by row, that every acknowledged write is present exactly once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dsn == "" || ledgerPath == "" {
				return cli.Usagef("workload verify: --dsn and --ledger are required")
			}
			l, err := workload.LoadLedger(ledgerPath)
			if err != nil {
				return cli.UsageError{Msg: err.Error()}
			}
			ctx := cmd.Context()
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				return fmt.Errorf("workload verify: %w", err)
			}
			defer conn.Close(context.Background())
			chk, err := workload.Verify(ctx, conn, l)
			if err != nil {
				return err
			}
			if asJSON {
				if err := cli.WriteJSON(cmd.OutOrStdout(), chk); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "acknowledged %d, missing %d, duplicated %d\n", chk.Acknowledged, chk.Missing, chk.Duplicated)
			}
			if !chk.OK() {
				return fmt.Errorf("workload verify: %d acknowledged writes missing, %d duplicated", chk.Missing, chk.Duplicated)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dsn, "dsn", "", "PostgreSQL connection string of the server that now owns the data")
	cmd.Flags().StringVar(&ledgerPath, "ledger", "", "ledger file written by `sluice workload run --ledger`")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func secondRecord(s workload.Second) []string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	return []string{strconv.Itoa(s.T), strconv.Itoa(s.Count), strconv.Itoa(s.Errors), f(s.MeanMs), f(s.P50Ms), f(s.P95Ms), f(s.P99Ms), f(s.QueueMs), f(s.Rate), strconv.Itoa(s.QueueLen)}
}

func printSummary(w io.Writer, s workload.Summary) {
	fmt.Fprintf(w, "%d transactions in %.1f s (%.1f tps), %d errors, %d dropped\n", s.Transactions, s.Seconds, s.ThroughputTPS, s.Errors, s.Dropped)
	fmt.Fprintf(w, "latency ms: mean %.1f  p50 %.1f  p95 %.1f  p99 %.1f;  %d writes acknowledged\n", s.MeanMs, s.P50Ms, s.P95Ms, s.P99Ms, s.WritesAcked)
}

func errOrZero(err error, zero string) string {
	if err != nil {
		return err.Error()
	}
	return zero
}
