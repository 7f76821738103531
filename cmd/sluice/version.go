package main

import (
	"fmt"
	"runtime/debug"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/spf13/cobra"
)

func init() {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print sluice's version and build information",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := map[string]string{"version": "dev", "go": "unknown"}
			if bi, ok := debug.ReadBuildInfo(); ok {
				v["go"] = bi.GoVersion
				if bi.Main.Version != "" {
					v["version"] = bi.Main.Version
				}
			}
			if asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), v)
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "sluice %s (%s)\n", v["version"], v["go"])
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	root.AddCommand(cmd)
}
