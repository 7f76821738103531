package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicedb/sluice/agent"
	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/auth"
	"github.com/sluicedb/sluice/internal/certs"
	"github.com/sluicedb/sluice/internal/cli"
)

// defaultAgentURL is the agent the tenant and migrate commands talk to when
// neither --agent nor $SLUICE_AGENT names one.
const defaultAgentURL = "http://127.0.0.1:7001"

// defaultAgentProcs is the GOMAXPROCS `sluice agent` runs with unless --procs
// says otherwise: 1. The agent lives inside the server whose slack it spends
// and mostly waits (on its pacers, the network, PostgreSQL); with more Ps the
// runtime wakes and spins idle threads at every hand-off between its
// goroutines, which cost a paced snapshot stream 17–26 % more CPU per MB at 2
// Ps (`go test -run XXX -bench PacedSnapshotCPU -benchtime=1x ./agent`). One P
// still copies hundreds of MB/s, more than a migration is paced at.
const defaultAgentProcs = 1

func init() {
	var configPath string
	var procs int
	var insecureLoopback bool
	cmd := &cobra.Command{
		Use:   "agent --config FILE",
		Short: "Run the per-server agent: tenants, catalog, HTTP API, migrations",
		Long: `Run the per-server agent. It owns a root directory with its catalog and one
PostgreSQL postmaster per tenant, serves the HTTP API documented in
docs/agent-api.md, and runs both ends of migrations with its peers.
Stops on SIGINT/SIGTERM; tenant postmasters keep running.

The API is mutual TLS (the config's tls_cert, tls_key and tls_ca; make them
with sluice certs): every caller presents a certificate of that CA. Only an
agent listening on loopback may run without, by --insecure-loopback (plain
HTTP and the token; nothing leaves the host).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath == "" {
				return cli.Usagef("agent: --config is required")
			}
			if procs < 0 {
				return cli.Usagef("agent: --procs must be 0 (Go's default) or positive")
			}
			cfg, err := agent.LoadConfig(configPath)
			if err != nil {
				return cli.Usagef("%v", err)
			}
			if insecureLoopback {
				cfg.InsecureLoopback = true
			}
			cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			a, err := agent.New(cfg)
			if err != nil {
				if errors.Is(err, agent.ErrConfig) {
					return cli.Usagef("%v", err)
				}
				return err
			}
			if procs > 0 {
				runtime.GOMAXPROCS(procs)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			fmt.Fprintf(cmd.ErrOrStderr(), "sluice agent %s serving %s\n", a.Name(), a.URL())
			return a.Serve(ctx)
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "agent config file (JSON)")
	cmd.Flags().BoolVar(&insecureLoopback, "insecure-loopback", false, "serve plain HTTP (token only, no certificates); refused unless the listen address is loopback (the config's insecure_loopback)")
	cmd.Flags().IntVar(&procs, "procs", defaultAgentProcs, "OS threads running Go code at once (GOMAXPROCS); 0 = Go's default (one per core, or the cgroup's CPU limit, at least 2)")
	root.AddCommand(cmd)
}

// tokenFile is --token-file of the commands that talk to an agent;
// tlsFlags are their --cert, --key and --ca.
var (
	tokenFile string
	tlsFlags  certs.Files
)

// tokenFileUsage is --token-file's help, the same on every command.
const tokenFileUsage = "file holding the agent's API token (default $SLUICE_TOKEN, else the token the agent registered on this host)"

// addAgentAuthFlags registers --token-file, --cert, --key and --ca on fs:
// how a command that talks to an agent proves who it is.
func addAgentAuthFlags(fs *pflag.FlagSet) {
	fs.StringVar(&tokenFile, "token-file", "", tokenFileUsage)
	fs.StringVar(&tlsFlags.Cert, "cert", "", "PEM client certificate presented to an https:// agent (default $SLUICE_CERT; sluice certs issue --client)")
	fs.StringVar(&tlsFlags.Key, "key", "", "PEM key of --cert (default $SLUICE_KEY)")
	fs.StringVar(&tlsFlags.CA, "ca", "", "PEM CA file the agent's certificate must chain to (default $SLUICE_CA)")
}

// agentClient returns a client for --agent (or $SLUICE_AGENT, or the
// default) that sends the agent's token (--token-file, $SLUICE_TOKEN, or
// the one the agent registered on this host: package internal/auth) and,
// for https:// agents, presents the client certificate of --cert/--key
// (or $SLUICE_CERT/$SLUICE_KEY) and trusts the CA of --ca (or $SLUICE_CA).
func agentClient(url string) (*client.Client, error) {
	if url == "" {
		url = os.Getenv("SLUICE_AGENT")
	}
	if url == "" {
		url = defaultAgentURL
	}
	c, err := client.New(url)
	if err != nil {
		return nil, cli.Usagef("--agent: %v", err)
	}
	tok, err := auth.Find(c.URL(), tokenFile)
	if err != nil && tokenFile != "" {
		return nil, cli.Usagef("--token-file: %v", err)
	}
	c = c.WithToken(tok)
	tf := certs.Files{Cert: cmp.Or(tlsFlags.Cert, os.Getenv("SLUICE_CERT")), Key: cmp.Or(tlsFlags.Key, os.Getenv("SLUICE_KEY")), CA: cmp.Or(tlsFlags.CA, os.Getenv("SLUICE_CA"))}
	if !tf.IsZero() {
		tc, err := tf.Client()
		if err != nil {
			return nil, cli.Usagef("--cert, --key, --ca: %v", err)
		}
		c = c.WithTLS(tc)
	}
	return c, nil
}

// agentErr turns an agent's refusal (4xx: bad input, nothing changed) into a
// usage error, so the CLI exits 2 with the agent's one-line message.
func agentErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if client.IsClientError(err) {
		return cli.Usagef("%s: %v", op, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}
