package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/internal/certs"
	"github.com/sluicedb/sluice/internal/cli"
)

func init() {
	cc := &cobra.Command{
		Use:   "certs",
		Short: "Make a small CA and the certificates of sluice's mutual TLS",
		Long: `Agents, proxies and the CLI authenticate each other with certificates of one
CA (mutual TLS; docs/design.md, Security). "certs init" makes that CA, "certs
issue" a certificate signed by it. Operators may use certificates of their own
CA instead: give any PEM certificate, key and CA file to the same settings.`,
	}
	var force, jsonOut bool
	initCmd := &cobra.Command{
		Use:   "init DIR",
		Short: "Make a CA in DIR: ca.crt and ca.key (ECDSA P-256, key mode 0600)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if err := certErr(certs.Init(dir, force, time.Now())); err != nil {
				return err
			}
			out := map[string]string{"ca_cert": filepath.Join(dir, certs.CACertFile), "ca_key": filepath.Join(dir, certs.CAKeyFile)}
			if jsonOut {
				return cli.WriteJSON(cmd.OutOrStdout(), out)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "CA certificate %s (give it to every agent, proxy and CLI)\nCA key %s (keep it here; it signs certificates)\n", out["ca_cert"], out["ca_key"])
			return nil
		},
	}
	initCmd.Flags().BoolVar(&force, "force", false, "replace an existing CA (the certificates it signed are then refused)")
	initCmd.Flags().BoolVar(&jsonOut, "json", false, "print the files made as JSON")

	var ca, name, hosts, out string
	var client bool
	issueCmd := &cobra.Command{
		Use:   "issue --ca DIR --name NAME [--host h1,h2,IP...] [--client]",
		Short: "Issue a certificate signed by the CA in DIR: NAME.crt and NAME.key",
		Long: `Issue a certificate signed by the CA in --ca, written as NAME.crt and NAME.key
(mode 0600) in --out (default: the CA's directory). A server's certificate (an
agent's or a proxy's, the default) names every host and address it is reached
at (--host) and may also act as a client (agents and proxies call each other);
--client makes one for the CLI or an operator, which needs no host.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ca == "" {
				return cli.Usagef("certs issue: --ca is required (the directory of sluice certs init)")
			}
			if name == "" {
				return cli.Usagef("certs issue: --name is required")
			}
			r := certs.Request{Name: name, Client: client}
			if hosts != "" {
				r.Hosts = strings.Split(hosts, ",")
			}
			dir := out
			if dir == "" {
				dir = ca
			}
			path, err := certs.Issue(ca, dir, r, force, time.Now())
			if err := certErr(err); err != nil {
				return err
			}
			res := map[string]string{"cert": path, "key": strings.TrimSuffix(path, ".crt") + ".key", "ca_cert": filepath.Join(ca, certs.CACertFile)}
			if jsonOut {
				return cli.WriteJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "certificate %s\nkey %s\n", res["cert"], res["key"])
			return nil
		},
	}
	f := issueCmd.Flags()
	f.StringVar(&ca, "ca", "", "directory of the CA (sluice certs init)")
	f.StringVar(&name, "name", "", "the certificate's name (common name and file name)")
	f.StringVar(&hosts, "host", "", "comma-separated DNS names and IP addresses the holder is reached at (required unless --client)")
	f.BoolVar(&client, "client", false, "a client-only certificate (the CLI, an operator)")
	f.StringVar(&out, "out", "", "directory to write NAME.crt and NAME.key in (default --ca)")
	f.BoolVar(&force, "force", false, "replace existing NAME.crt and NAME.key")
	f.BoolVar(&jsonOut, "json", false, "print the files made as JSON")
	cc.AddCommand(initCmd, issueCmd)
	root.AddCommand(cc)
}

// certErr turns the refusals of package certs (bad input, a missing CA,
// existing files) into usage errors: exit 2, one line, nothing written.
func certErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, certs.ErrBadInput) {
		return cli.Usagef("certs: %v", err)
	}
	if errors.Is(err, certs.ErrExists) {
		return cli.Usagef("%v", err)
	}
	return err
}
