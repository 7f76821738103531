// Package commands holds the lab's command group, `sluice lab …`: the
// benchmarks, the plant simulator, gain tuning on it and the YCSB workload,
// and `sluice demo`. They measure the product; no product package imports
// them. cmd/sluice attaches Lab and Demo to its root.
package commands

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/internal/cli"
)

// Lab is the parent of the lab's commands. Each file registers its command
// with it in an init function.
var Lab = &cobra.Command{
	Use:   "lab",
	Short: "Benchmarks, the plant simulator, tuning on it, and the YCSB workload",
	Long: `The lab measures sluice: benchmarks against their baselines in one run, a soak (a
tenant moved back and forth under load for an hour, looking for leaks), the plant
simulator, gain tuning on it, and the transactional YCSB workload with its ledger.
` + "`sluice bench`, `sluice sim`, `sluice tune` and `sluice workload`" + ` are aliases of
` + "`sluice lab bench`" + ` and the rest.`,
}

// Demo is `sluice demo`: the product end to end on one machine.
var Demo *cobra.Command

// Aliases are the lab's commands a user may name without "lab".
var Aliases = []string{"bench", "sim", "tune", "workload"}

// run executes the lab's command tree with args, as the tests call it.
func run(args []string, stdout, stderr io.Writer) int {
	cli.Prepare(Lab)
	return cli.Run(context.Background(), Lab, args, stdout, stderr)
}
