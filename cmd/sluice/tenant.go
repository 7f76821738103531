package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/proxy"
)

func init() {
	var agentURL string
	var asJSON bool
	tc := &cobra.Command{
		Use:   "tenant",
		Short: "Create, list, start, stop and delete tenants on an agent",
	}
	tc.PersistentFlags().StringVar(&agentURL, "agent", "", "agent API URL (default $SLUICE_AGENT or "+defaultAgentURL+")")
	tc.PersistentFlags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	addAgentAuthFlags(tc.PersistentFlags())

	create := tenantCreateCmd(&agentURL, &asJSON)

	var all bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the agent's tenants",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := agentClient(agentURL)
			if err != nil {
				return err
			}
			ts, err := c.Tenants(cmd.Context(), all)
			if err != nil {
				return agentErr("tenant list", err)
			}
			if asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), ts)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tNAME\tSTATE\tALIVE\tADDRESS\tMIGRATION\tDIR")
			for _, t := range ts {
				fmt.Fprintf(w, "%d\t%s\t%s\t%t\t%s\t%s\t%s\n", t.ID, t.Name, t.State, t.Alive, net.JoinHostPort(t.Host, strconv.Itoa(t.Port)), dash(t.Migration), t.Dir)
			}
			return w.Flush()
		},
	}
	list.Flags().BoolVar(&all, "all", false, "include deleted tenants")

	op := func(use, short string, do func(c *client.Client, cmd *cobra.Command, id int64) (client.Tenant, error)) *cobra.Command {
		return &cobra.Command{
			Use:   use + " ID",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				id, err := strconv.ParseInt(args[0], 10, 64)
				if err != nil || id <= 0 {
					return cli.Usagef("tenant %s: bad tenant id %q: want a positive integer", use, args[0])
				}
				c, err := agentClient(agentURL)
				if err != nil {
					return err
				}
				tn, err := do(c, cmd, id)
				if err != nil {
					return agentErr("tenant "+use, err)
				}
				if asJSON {
					return cli.WriteJSON(cmd.OutOrStdout(), tn)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "tenant %d (%s) %s\n", tn.ID, tn.Name, tn.State)
				return nil
			},
		}
	}
	start := op("start", "Start a stopped tenant's postmaster", func(c *client.Client, cmd *cobra.Command, id int64) (client.Tenant, error) {
		return c.StartTenant(cmd.Context(), id)
	})
	stop := op("stop", "Stop a tenant's postmaster (fast shutdown)", func(c *client.Client, cmd *cobra.Command, id int64) (client.Tenant, error) {
		return c.StopTenant(cmd.Context(), id)
	})
	del := op("delete", "Stop a tenant and remove its data directory", func(c *client.Client, cmd *cobra.Command, id int64) (client.Tenant, error) {
		return c.DeleteTenant(cmd.Context(), id)
	})
	show := op("show", "Show one tenant", func(c *client.Client, cmd *cobra.Command, id int64) (client.Tenant, error) {
		return c.Tenant(cmd.Context(), id)
	})
	tc.AddCommand(create, list, start, stop, del, show)
	root.AddCommand(tc)
}

// tenantCreateCmd is `sluice tenant create`; agentURL and asJSON are the
// tenant command's persistent flags.
func tenantCreateCmd(agentURL *string, asJSON *bool) *cobra.Command {
	var id int64
	var name string
	var set []string
	var usersFile string
	create := &cobra.Command{
		Use:   "create [--id N] [--name NAME] [--set key=value]... [--users FILE]",
		Short: "Create a tenant (initdb, configure, start); prints it when it is running",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := agentClient(*agentURL)
			if err != nil {
				return err
			}
			if id < 0 {
				return cli.Usagef("tenant create: --id %d must be positive", id)
			}
			settings := map[string]string{}
			for _, kv := range set {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return cli.Usagef("tenant create: --set %q: want key=value", kv)
				}
				settings[k] = v
			}
			users, err := readUsers(usersFile)
			if err != nil {
				return err
			}
			req := client.CreateTenant{ID: id, Name: name, Settings: settings, Users: users}
			if err := req.Validate(); err != nil {
				return cli.Usagef("tenant create: --users %s: %v", usersFile, err)
			}
			tn, err := c.CreateTenant(cmd.Context(), req)
			if err != nil {
				return agentErr("tenant create", err)
			}
			if *asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), tn)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "tenant %d (%s) %s on %s\n", tn.ID, tn.Name, tn.State, net.JoinHostPort(tn.Host, strconv.Itoa(tn.Port)))
			return nil
		},
	}
	create.Flags().Int64Var(&id, "id", 0, "tenant id (default: the agent picks the next one); the port is base_port+id")
	create.Flags().StringVar(&name, "name", "", "tenant name (default tenant-ID)")
	create.Flags().StringVar(&usersFile, "users", "", "userlist (the proxy's --auth-file format): each user becomes a login role of the tenant, not a superuser, with that password; the first owns its database")
	create.Flags().StringArrayVar(&set, "set", nil, "postgresql.conf parameter key=value (repeatable), e.g. --set shared_buffers=128MB")
	return create
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// readUsers reads a userlist file ("" = none) into tenant users, in the
// file's order.
func readUsers(path string) ([]client.User, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, cli.Usagef("tenant create: --users: %v", err)
	}
	names, pw, err := proxy.ParseUserlistOrdered(string(b))
	if err != nil {
		return nil, cli.Usagef("tenant create: --users %s: %v", path, err)
	}
	if len(names) == 0 {
		return nil, cli.Usagef("tenant create: --users %s: no user in it", path)
	}
	users := make([]client.User, len(names))
	for i, n := range names {
		users[i] = client.User{Name: n, Password: pw[n]}
	}
	return users, nil
}
