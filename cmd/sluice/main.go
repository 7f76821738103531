// Command sluice moves live PostgreSQL data between servers while holding the
// foreground's transaction latency at a setpoint.
//
// Every subcommand lives in its own file of this package and registers itself
// with root in an init function. Conventions every subcommand follows:
//
//   - figures it prints are also available as one JSON object with --json;
//   - bad usage returns usageError (via usagef): main prints one line
//     "sluice: <reason>" on stderr and exits 2, having changed nothing;
//   - any other error prints "sluice: <error>" and exits 1.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

var root = &cobra.Command{
	Use:           "sluice",
	Short:         "Move live PostgreSQL data without hurting the people using it",
	SilenceUsage:  true,
	SilenceErrors: true,
}

// usageError marks an error as the caller's fault: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// usagef returns a usageError with a formatted one-line message.
func usagef(format string, args ...any) error {
	return usageError{msg: fmt.Sprintf(format, args...)}
}

// writeJSON prints v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func init() {
	// Flag parse errors and unknown commands are usage errors too.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return usageError{msg: err.Error()}
	})
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

// runContext is run with the commands' context ctx.
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "sluice: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(cmd, err) {
		return 2
	}
	return 1
}

// isCobraUsage reports whether err came from cobra's own argument checks
// (unknown command, wrong number of args) rather than from running a command.
func isCobraUsage(cmd *cobra.Command, err error) bool {
	if cmd == nil {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"unknown command", "accepts ", "requires at least", "requires at most", "unknown flag", "unknown shorthand", "invalid argument"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
