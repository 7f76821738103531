// Command sluice moves live PostgreSQL data between servers while holding the
// foreground's transaction latency at a setpoint.
//
// The product's commands (agent, proxy, tenant, migrate, migration, dashboard, version)
// live in this package, each in its own file registering itself with root in
// an init function; the lab's (`sluice lab …` and `sluice demo`) live in
// lab/commands and are attached here. internal/cli states the conventions
// every command follows (--json, exit 2 for bad usage).
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/lab/commands"
)

var root = &cobra.Command{
	Use:   "sluice",
	Short: "Move live PostgreSQL data without hurting the people using it",
}

func init() {
	cli.Prepare(root)
	root.AddCommand(commands.Lab, commands.Demo)
}

func main() {
	// The first ^C (or SIGTERM) cancels the command's context, so benchmarks
	// and migrations stop their servers and children on the way out; a
	// second one kills at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }()
	os.Exit(runContext(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the CLI with args and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdout, stderr)
}

// runContext is run with the commands' context ctx. A lab command named
// without "lab" (`sluice bench …`) runs as `sluice lab bench …`.
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && slices.Contains(commands.Aliases, args[0]) {
		args = append([]string{"lab"}, args...)
	}
	return cli.Run(ctx, root, args, stdout, stderr)
}
