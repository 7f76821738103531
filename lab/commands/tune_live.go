package commands

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/control/tune"
	"github.com/sluicedb/sluice/internal/auth"
	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/experiment"
	"github.com/sluicedb/sluice/plan"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// tuneLiveFlags are `sluice tune --live`'s own flags.
type tuneLiveFlags struct {
	live             bool
	agent, proxy, to string
	tenant           int64
}

var tuneLive tuneLiveFlags

func init() {
	f := tuneCmd.Flags()
	f.BoolVar(&tuneLive.live, "live", false, "profile the running system instead of a scenario: migrate --tenant at fixed rates, then roll it back")
	f.StringVar(&tuneLive.agent, "agent", "", "--live: the tenant's agent API URL")
	f.StringVar(&tuneLive.proxy, "proxy", "", "--live: the proxy's API URL (its per-tenant latency windows)")
	f.Int64Var(&tuneLive.tenant, "tenant", 0, "--live: the tenant to migrate while profiling")
	f.StringVar(&tuneLive.to, "to", "", "--live: the agent to migrate it to (a peer)")
	tuneCmd.Long += `

With --live it profiles the running system instead (Aqueduct §5.1): it migrates
--tenant from --agent to --to at a staircase of fixed rates (the control profile's
top speed /64 doubling to /2, 6 s a rung, each inside one snapshot: a fresh
migration when the last has too little left), reads every tenant's latency from the
proxy (--proxy), stops at the first rung whose victim store (smallest P·LC − L) is
over --contract (default 10 ms), rolls the migration back, fits G over the measured
rates, and proposes K = (1-p)/G for --pole; a K >= 2/G (--k, or from --pole) is
refused unless --force.`
	tuneCmd.Example += `
  sluice tune --live --agent http://db1:7001 --proxy http://proxy:7000 --tenant 3 --to db2 --contract 10ms --pole 0.5`
}

// tuneLiveJSON is `sluice tune --live --json`.
type tuneLiveJSON struct {
	experiment.LiveFit
	ContractMs float64 `json:"contract_ms"`
	Pole       float64 `json:"pole"`
	K          float64 `json:"k"`
	KMax       float64 `json:"k_max"`
	Stable     bool    `json:"stable"`
}

// checkTuneModes refuses the flags of the mode not chosen.
func checkTuneModes(cmd *cobra.Command) error {
	live := []string{"agent", "proxy", "tenant", "to"}
	sim := []string{"scenario", "seed", "setpoint", "radius"}
	bad := live
	if tuneLive.live {
		bad = sim
	}
	for _, name := range bad {
		if cmd.Flags().Changed(name) {
			if tuneLive.live {
				return cli.Usagef("tune: --%s profiles a simulator scenario; --live profiles the running system", name)
			}
			return cli.Usagef("tune: --%s is for --live", name)
		}
	}
	return nil
}

func runTuneLive(cmd *cobra.Command, f tuneFlags) error {
	if tuneLive.agent == "" || tuneLive.proxy == "" || tuneLive.tenant <= 0 || tuneLive.to == "" {
		return cli.Usagef("tune --live: --agent, --proxy, --tenant and --to are required")
	}
	if !(f.pole > -1 && f.pole < 1) && !f.force {
		return cli.Usagef("tune: pole %v is outside (-1, 1): the integral loop would be unstable (use --force to accept)", f.pole)
	}
	if cmd.Flags().Changed("k") && (!(f.k > 0) || math.IsInf(f.k, 0)) {
		return cli.Usagef("tune: --k must be > 0, got %v", f.k)
	}
	contract := time.Duration(plan.DefaultContractMs) * time.Millisecond
	if cmd.Flags().Changed("contract") {
		var err error
		if contract, err = simParseLatency("contract", f.contract); err != nil {
			return err
		}
	}
	ac, err := agentclient.New(tuneLive.agent)
	if err != nil {
		return cli.Usagef("tune --live: --agent: %v", err)
	}
	if tok, err := auth.Find(ac.URL(), ""); err == nil {
		ac = ac.WithToken(tok)
	}
	pc := proxyclient.New(tuneLive.proxy, nil)
	if tok, err := auth.Find(tuneLive.proxy, ""); err == nil {
		pc = pc.WithToken(tok)
	}
	say := func(format string, args ...any) {
		if !f.json {
			fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...)
		}
	}
	fit, err := experiment.LiveProfile{Agent: ac, Proxy: pc, Tenant: tuneLive.tenant, To: tuneLive.to, DefaultContract: contract, Progress: say}.Run(cmd.Context())
	if err != nil {
		return fmt.Errorf("tune --live: %w", err)
	}
	j := tuneLiveJSON{LiveFit: fit, ContractMs: float64(contract) / 1e6, Pole: f.pole, KMax: 2 / fit.G}
	if cmd.Flags().Changed("k") {
		j.K, j.Pole = f.k, tune.Pole(fit.G, f.k)
	} else if j.K, err = tune.ProposeK(fit.G, f.pole); err != nil {
		return fmt.Errorf("tune --live: %w", err)
	}
	j.Stable = tune.Stable(fit.G, j.K)
	if !j.Stable && !f.force {
		return cli.Usagef("tune: K=%.4g is outside (0, 2/G=%.4g) for the fitted G=%.4g s per byte/s: pole %.3f, unstable (use --force to accept)", j.K, j.KMax, fit.G, j.Pole)
	}
	if f.json {
		return cli.WriteJSON(cmd.OutOrStdout(), j)
	}
	printTuneLive(cmd.OutOrStdout(), j)
	return nil
}

func printTuneLive(w io.Writer, j tuneLiveJSON) {
	fmt.Fprintf(w, "live profile: fixed-rate rungs until the victim store exceeds its contract (%.1f ms)\n", j.ContractMs)
	fmt.Fprintf(w, "%12s %12s %12s %8s\n", "set", "measured", "victim ms", "victim")
	for _, p := range j.Points {
		note := ""
		if p.OverLimit {
			note = "  over contract: stop"
		}
		fmt.Fprintf(w, "%12s %12s %12.2f %8s%s\n", units.FormatRate(p.SetRate), units.FormatRate(p.Rate), p.VictimMs, p.Victim, note)
	}
	fmt.Fprintf(w, "fit: G = %.3g s per byte/s (%.3f ms per MB/s), intercept %.2f ms, R² %.3f over %d rungs\n", j.G, j.GmsPerMBps, j.InterceptMs, j.R2, len(j.Points))
	fmt.Fprintf(w, "integral gain K = %s (bytes/s per second of error) for pole %.2f; stable for K < 2/G = %s\n",
		strconv.FormatFloat(j.K, 'g', 4, 64), j.Pole, strconv.FormatFloat(j.KMax, 'g', 4, 64))
	fmt.Fprintln(w, `use it: "k": K in a plan file (sluice plan apply)`)
}
