package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// WriteReference writes the command tree under root as one Markdown page:
// a section per command, in the tree's order, with its synopsis, its long
// description, examples and flags as `--help` prints them. Hidden commands
// and cobra's own (help, completion) are left out.
func WriteReference(w io.Writer, root *cobra.Command) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# `%s` command reference\n\n", root.Name())
	b.WriteString("Generated from the command tree (`make docs`); a test checks it is current.\n")
	b.WriteString("Every command that prints figures takes `--json`.\n" + ExitContract + "\n")
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		// Cobra adds --help to a command when it first runs one; add it
		// here so the reference is the same whether or not any has run.
		c.InitDefaultHelpFlag()
		if c != root {
			section(&b, c)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	_, err := io.WriteString(w, b.String())
	return err
}

// section writes one command's section.
func section(b *strings.Builder, c *cobra.Command) {
	fmt.Fprintf(b, "\n## %s\n\n%s.\n\n", c.CommandPath(), strings.TrimSuffix(c.Short, "."))
	fmt.Fprintf(b, "```\n%s\n```\n", c.UseLine())
	if c.Long != "" {
		fmt.Fprintf(b, "\n%s\n", strings.TrimSpace(c.Long))
	}
	if c.Example != "" {
		fmt.Fprintf(b, "\nExamples:\n\n```\n%s\n```\n", strings.TrimRight(c.Example, "\n"))
	}
	if c.HasAvailableLocalFlags() {
		fmt.Fprintf(b, "\nFlags:\n\n```\n%s```\n", c.LocalFlags().FlagUsages())
	}
	var subs []string
	for _, s := range c.Commands() {
		if !s.Hidden && s.Name() != "help" {
			subs = append(subs, fmt.Sprintf("`%s`", s.Name()))
		}
	}
	if len(subs) > 0 {
		fmt.Fprintf(b, "\nSubcommands: %s.\n", strings.Join(subs, ", "))
	}
}
