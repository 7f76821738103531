package main

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/dashboard"
	"github.com/sluicedb/sluice/internal/auth"
	"github.com/sluicedb/sluice/internal/cli"
)

func init() {
	var agentURL string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Print the URL of an agent's live page (migrations, tenants, latency) with its token",
		Long: `Print the URL of an agent's live page: its migrations as they run (phase,
bytes, rate, ETA, lag, the clients' latency against the setpoint and the
controller's rate, charted each second), the finished ones with their summary,
the tenants here and on the agent's peers, keyspaces and the proxy's latency
windows; with Pause, Resume, rate and Abort buttons.

The URL carries the agent's token in its fragment (#token=…), which a browser
never sends to a server: the page keeps it in the tab's sessionStorage, takes it
out of the address bar and sends it as the Authorization header, as the CLI
does. Anyone with the URL can act on the agent: treat it as the token. The
command first checks that the agent answers with that token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := agentClient(agentURL)
			if err != nil {
				return err
			}
			if _, err := c.Overview(cmd.Context()); err != nil {
				return agentErr("dashboard", err)
			}
			tok, _ := auth.Find(c.URL(), tokenFile)
			u := strings.TrimRight(c.URL(), "/") + dashboard.Prefix
			if tok != "" {
				u += "#token=" + url.QueryEscape(tok)
			}
			if asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), map[string]string{"url": u})
			}
			fmt.Fprintln(cmd.OutOrStdout(), u)
			return nil
		},
	}
	cmd.Flags().StringVar(&agentURL, "agent", "", "agent API URL (default $SLUICE_AGENT or "+defaultAgentURL+")")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", tokenFileUsage)
	root.AddCommand(cmd)
}
