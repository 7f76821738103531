// Package cli holds what every sluice command shares: how a command reports
// the caller's mistakes (exit 2, one line), how it prints figures as JSON,
// and how the process maps an error to its exit code.
//
// Conventions every subcommand follows:
//
//   - figures it prints are also available as one JSON object with --json;
//   - bad usage returns a UsageError (via Usagef): Run prints one line
//     "sluice: <reason>" on stderr and exits 2, having changed nothing;
//   - any other error prints "sluice: <error>" and exits 1.
//
// The exit codes are a contract scripts rely on (ExitContract):
//
//   - 0: done.
//   - 2: the command or what it asks is wrong, and nothing was changed: bad
//     flags or arguments, an invalid agent config, an agent's refusal of the
//     request (HTTP 4xx: unknown tenant or migration, a rate under the
//     floor, a conflict with the tenant's state, a preflight refused).
//     Running the same command again fails the same way.
//   - 1: a right command could not be carried out: an agent, or the peer
//     agent it needs, is unreachable or fails (HTTP 5xx; 502 for a peer), a
//     port is in use, a migration ended aborted. Running it again may
//     succeed once the fault is gone.
//
// PostgreSQL's own tools agree on no rule to copy (psql exits 2 when it
// cannot connect and 1 on a bad option; pg_ctl 1 for both); sluice keeps
// the rule of Go's flag package and cobra's tools, usage errors 2, so that
// "fix the command" and "retry later" differ.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// ExitContract is the exit codes' contract in one line, for the command
// reference and the README.
const ExitContract = "Exit codes: 0 done; 2 the command or its request is wrong (bad flags or arguments, a bad agent config, an agent's refusal: HTTP 4xx), nothing changed; 1 a right command could not be carried out (an agent or the peer it needs unreachable or failing, a port in use, a migration aborted). Either way, one line on stderr."

// UsageError marks an error as the caller's fault: exit code 2.
type UsageError struct{ Msg string }

func (e UsageError) Error() string { return e.Msg }

// Usagef returns a UsageError with a formatted one-line message.
func Usagef(format string, args ...any) error {
	return UsageError{Msg: fmt.Sprintf(format, args...)}
}

// WriteJSON prints v as indented JSON followed by a newline.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Prepare sets root's flag errors to be usage errors. Call it once on the
// root of a command tree before Run.
func Prepare(root *cobra.Command) {
	root.SilenceUsage, root.SilenceErrors = true, true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return UsageError{Msg: err.Error()}
	})
}

// Run executes root with args and the commands' context ctx, and returns the
// process exit code: 0, 1 for a failure, 2 for bad usage.
func Run(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "sluice: %v\n", err)
	var ue UsageError
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

// IsTerminal reports whether w is a character device (a terminal), where
// progress may redraw one line in place.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// ResetFlags sets every flag of c and its subcommands back to its default
// and unchanged: cobra keeps flag values between executions in one process,
// which tests that run many command lines must undo.
func ResetFlags(c *cobra.Command) error {
	var err error
	for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
		fs.VisitAll(func(f *pflag.Flag) {
			if sv, ok := f.Value.(pflag.SliceValue); ok {
				sv.Replace(nil)
			} else if e := f.Value.Set(f.DefValue); e != nil && err == nil {
				err = fmt.Errorf("reset --%s: %w", f.Name, e)
			}
			f.Changed = false
		})
	}
	for _, sub := range c.Commands() {
		if e := ResetFlags(sub); e != nil && err == nil {
			err = e
		}
	}
	return err
}
