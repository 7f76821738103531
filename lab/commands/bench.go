package commands

import "github.com/spf13/cobra"

// benchCmd is the parent of every `sluice bench …` benchmark. Each benchmark
// starts what it measures (clusters, agents, proxies) itself, compares against
// its baseline in the same run, and prints its figures (also with --json).
// Subcommands register themselves with benchCmd.AddCommand from their own file.
var benchCmd = &cobra.Command{
	Use:   "bench",
	Short: "Run a benchmark against its baseline in one run",
}

func init() { Lab.AddCommand(benchCmd) }
