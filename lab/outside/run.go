package outside

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/auth"
	"github.com/sluicedb/sluice/internal/clock"
	"github.com/sluicedb/sluice/pgcluster"
)

// Options configure a run. Zero values take the defaults noted.
type Options struct {
	Out      string        // output directory (required)
	Binary   string        // the sluice executable; "" = this process's own
	Scale    int           // pgbench scale; default 44 (about 660 MB)
	Clients  int           // pgbench -c; default 4
	Threads  int           // pgbench -j; default 2
	Rate     float64       // pgbench -R, transactions/s; default 50
	Factor   float64       // setpoint = Factor × the idle mean; default 2.5
	Idle     time.Duration // the idle measurement; default 20 s
	Rounds   int           // pairs of migrations (unthrottled, then controlled); default 1
	Progress func(format string, args ...any)
}

func (o Options) withDefaults() (Options, error) {
	if o.Scale == 0 {
		o.Scale = 44
	}
	if o.Clients == 0 {
		o.Clients = 4
	}
	if o.Threads == 0 {
		o.Threads = 2
	}
	if o.Rate == 0 {
		o.Rate = 50
	}
	if o.Factor == 0 {
		o.Factor = 2.5
	}
	if o.Idle == 0 {
		o.Idle = 20 * time.Second
	}
	if o.Rounds == 0 {
		o.Rounds = 1
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	switch {
	case o.Out == "":
		return o, fmt.Errorf("outside: no output directory")
	case o.Scale < 1 || o.Clients < 1 || o.Threads < 1 || o.Threads > o.Clients || o.Rounds < 1:
		return o, fmt.Errorf("outside: scale, clients, threads (≤ clients) and rounds must be positive")
	case !(o.Rate > 0) || math.IsInf(o.Rate, 0):
		return o, fmt.Errorf("outside: pgbench rate %v must be a positive number", o.Rate)
	case !(o.Factor > 1) || math.IsInf(o.Factor, 0):
		return o, fmt.Errorf("outside: setpoint factor %v must be above 1", o.Factor)
	case o.Idle < 5*time.Second:
		return o, fmt.Errorf("outside: idle measurement %v is shorter than 5s", o.Idle)
	}
	return o, nil
}

// Check reports the first bad option before anything starts.
func (o Options) Check() error {
	_, err := o.withDefaults()
	return err
}

// Migration is one migration as `sluice migrate --json` reported it and
// as pgbench's clients saw it.
type Migration struct {
	Controlled bool    `json:"controlled"`
	SetpointMs float64 `json:"setpoint_ms,omitempty"`
	From, To   string  `json:"-"`
	Seconds    float64 `json:"seconds"` // wall time of the migrate command
	Bytes      int64   `json:"bytes"`
	FreezeMs   float64 `json:"freeze_ms"`
	Clients    Window  `json:"clients"` // transactions that ended during it
	start, end time.Time
}

// Round is one pair: the unthrottled migration and the controlled one.
type Round struct {
	Unthrottled Migration `json:"unthrottled"`
	Controlled  Migration `json:"controlled"`
	Verdict     Verdict   `json:"verdict"`
}

// Result is the run's summary; its JSON keys are `sluice bench outside
// --json`'s.
type Result struct {
	Command    string  `json:"command"`
	Machine    string  `json:"machine"`
	Started    string  `json:"started"`
	Scale      int     `json:"pgbench_scale"`
	PgbenchArg string  `json:"pgbench"`
	IdleMeanMs float64 `json:"idle_mean_ms"`
	Idle       Window  `json:"idle"`
	SetpointMs float64 `json:"setpoint_ms"`
	Rounds     []Round `json:"rounds"`
	Pass       bool    `json:"pass"` // every round passed
	// LogsCut counts pgbench logs whose last line was cut short (pgbench
	// stopped mid-write) and left out.
	LogsCut int `json:"pgbench_logs_cut"`
}

// Run performs the judgement. It stops everything it started.
func Run(ctx context.Context, opt Options, command, machine string) (Result, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return Result{}, err
	}
	if opt.Binary == "" {
		if opt.Binary, err = os.Executable(); err != nil {
			return Result{}, err
		}
	}
	if err := os.MkdirAll(opt.Out, 0o755); err != nil {
		return Result{}, err
	}
	res := Result{Command: command, Machine: machine, Started: time.Now().UTC().Format(time.RFC3339), Scale: opt.Scale,
		PgbenchArg: fmt.Sprintf("-c %d -j %d -R %g -l", opt.Clients, opt.Threads, opt.Rate)}
	h, err := startHosts(ctx, opt)
	if err != nil {
		return res, err
	}
	defer h.close()
	say := opt.Progress

	say("loading pgbench scale %d into tenant %d", opt.Scale, h.tenant)
	if err := h.pgbench(ctx, "", "-i", "-q", "-s", strconv.Itoa(opt.Scale), "-h", "127.0.0.1", "-p", strconv.Itoa(h.tenantPort), "-U", "bench", "postgres"); err != nil {
		return res, err
	}
	h.psql(ctx, -1, "CHECKPOINT")
	say("idle: %s for %s through the proxy", res.PgbenchArg, opt.Idle)
	idle, err := h.load(ctx, "idle", opt.Idle)
	if err != nil {
		return res, err
	}
	res.Idle = Between(idle, time.Time{}, time.Now().Add(time.Hour))
	res.IdleMeanMs = res.Idle.MeanMs
	res.SetpointMs = round(opt.Factor*res.IdleMeanMs, 2)
	say("idle mean %.2f ms (%d transactions): setpoint %.2f ms", res.IdleMeanMs, res.Idle.Count, res.SetpointMs)

	// pgbench runs through all the migrations; each is read from its log.
	lctx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan error, 1)
	go func() { _, err := h.load(lctx, "migrations", 24*time.Hour); loadDone <- err }()
	clock.Sleep(ctx, 10*time.Second)
	at := "a"
	var rounds []Round
	for i := range opt.Rounds {
		var r Round
		for _, controlled := range []bool{false, true} {
			to := map[string]string{"a": "b", "b": "a"}[at]
			m := Migration{Controlled: controlled, From: at, To: to}
			if controlled {
				m.SetpointMs = res.SetpointMs
			}
			say("round %d: %s migration %s → %s", i+1, map[bool]string{false: "unthrottled", true: fmt.Sprintf("controlled (%.2f ms)", m.SetpointMs)}[controlled], at, to)
			if err := h.migrate(ctx, &m); err != nil {
				stopLoad()
				<-loadDone
				return res, err
			}
			at = to
			if controlled {
				r.Controlled = m
			} else {
				r.Unthrottled = m
			}
			clock.Sleep(ctx, 20*time.Second) // the handover's aftermath leaves the windows
		}
		rounds = append(rounds, r)
	}
	stopLoad()
	<-loadDone
	txs, err := h.readLog("migrations")
	if err != nil {
		return res, err
	}
	res.LogsCut = h.cut
	res.Pass = true
	for _, r := range rounds {
		r.Unthrottled.Clients = Between(txs, r.Unthrottled.start, r.Unthrottled.end)
		r.Controlled.Clients = Between(txs, r.Controlled.start, r.Controlled.end)
		r.Verdict = Judge(res.SetpointMs, r.Controlled.Clients.MeanMs, r.Controlled.Seconds, r.Unthrottled.Clients.MeanMs, r.Unthrottled.Seconds)
		res.Pass = res.Pass && r.Verdict.Pass
		say("unthrottled %.1f s, clients %.2f ms; controlled %.1f s, clients %.2f ms against %.2f: %s", r.Unthrottled.Seconds, r.Unthrottled.Clients.MeanMs,
			r.Controlled.Seconds, r.Controlled.Clients.MeanMs, res.SetpointMs, r.Verdict.Why)
		res.Rounds = append(res.Rounds, r)
	}
	return res, writeOutputs(opt.Out, res, txs)
}

// hosts are the processes of a run: two agents, a proxy, and their tenant.
type hosts struct {
	opt        Options
	dir        string
	agents     [2]string // API URLs of a and b
	proxyAddr  string    // clients' host:port
	tenant     int64
	tenantPort int
	tenantDir  string // its data directory: CHECKPOINT as the superuser over its socket
	password   string // the tenant user bench's, in users.txt (the proxy's --auth-file)
	procs      []*exec.Cmd
	cut        int // pgbench logs that ended in a line cut short
}

// startHosts starts agents a and b and a proxy following both, and creates
// the tenant on a.
func startHosts(ctx context.Context, opt Options) (*hosts, error) {
	dir, err := pgcluster.MkdirTemp("sluice-outside-")
	if err != nil {
		return nil, err
	}
	h := &hosts{opt: opt, dir: dir}
	// As an operator would on one host: the agents and the proxy make their
	// tokens and register them (here, under dir: XDG_CONFIG_HOME of every
	// process started), and find each other's there; clients log in as
	// bench, a user of the tenant and of the proxy's userlist.
	if h.password, err = auth.New(); err != nil {
		h.close()
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "users.txt"), []byte(`"bench" "`+h.password+`"`+"\n"), 0o600); err != nil {
		h.close()
		return nil, err
	}
	ports, err := freePorts(4)
	if err != nil {
		h.close()
		return nil, err
	}
	apiAddr := fmt.Sprintf("127.0.0.1:%d", ports[2])
	h.proxyAddr = fmt.Sprintf("127.0.0.1:%d", ports[3])
	for i, name := range []string{"a", "b"} {
		h.agents[i] = fmt.Sprintf("http://127.0.0.1:%d", ports[i])
		cfg := map[string]any{
			"name": name, "root": filepath.Join(dir, name), "listen": fmt.Sprintf("127.0.0.1:%d", ports[i]), "insecure_loopback": true,
			"proxy": "http://" + apiAddr, "tenant": map[string]any{"base_port": 21000 + 1000*i + ports[i]%500},
			"peers": map[string]string{map[string]string{"a": "b", "b": "a"}[name]: fmt.Sprintf("http://127.0.0.1:%d", ports[1-i])},
		}
		path := filepath.Join(dir, name+".json")
		b, _ := json.Marshal(cfg)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			h.close()
			return nil, err
		}
		if err := h.start(ctx, name+".log", "agent", "--config", path); err != nil {
			h.close()
			return nil, err
		}
	}
	for i := range h.agents {
		if err := waitAgent(ctx, func() *agentclient.Client { return h.agentClient(i) }); err != nil {
			h.close()
			return nil, err
		}
	}
	if err := h.start(ctx, "proxy.log", "proxy", "--auth-file", filepath.Join(dir, "users.txt"), "--quiet", "--listen", h.proxyAddr, "--api", apiAddr,
		"--catalog", h.agents[0], "--catalog", h.agents[1]); err != nil {
		h.close()
		return nil, err
	}
	c := h.agentClient(0)
	tn, err := c.CreateTenant(ctx, agentclient.CreateTenant{Name: "bench", Users: []agentclient.User{{Name: "bench", Password: h.password}}})
	if err != nil {
		h.close()
		return nil, fmt.Errorf("outside: create tenant: %w", err)
	}
	h.tenant, h.tenantPort, h.tenantDir = tn.ID, tn.Port, tn.Dir
	// The proxy routes the tenant once it has read a's catalog.
	for end := time.Now().Add(30 * time.Second); ; {
		if h.psql(ctx, 0, "SELECT 1") == nil {
			return h, nil
		}
		if time.Now().After(end) {
			h.close()
			return nil, fmt.Errorf("outside: the proxy at %s never routed tenant bench", h.proxyAddr)
		}
		clock.Sleep(ctx, 200*time.Millisecond)
	}
}

// start runs `sluice args…` in the background, its output to log.
func (h *hosts) start(ctx context.Context, log string, args ...string) error {
	f, err := os.Create(filepath.Join(h.dir, log))
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, h.opt.Binary, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = h.env()
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("outside: sluice %s: %w", args[0], err)
	}
	h.procs = append(h.procs, cmd)
	return nil
}

// close stops the tenants (their postmasters outlive an agent by design),
// the processes, and removes the directory.
func (h *hosts) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, u := range h.agents {
		if c := h.agentClient(i); u != "" && c != nil {
			ts, _ := c.Tenants(ctx, false)
			for _, t := range ts {
				if t.Alive {
					c.StopTenant(ctx, t.ID)
				}
			}
		}
	}
	for i := len(h.procs) - 1; i >= 0; i-- {
		p := h.procs[i]
		p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			p.Process.Kill()
			<-done
		}
	}
	os.RemoveAll(h.dir)
}

// pgbench runs pgbench with args (in the run's directory), its output to
// pgbench-<label>.out.
func (h *hosts) pgbench(ctx context.Context, label string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(pgcluster.DefaultBinDir, "pgbench"), args...)
	cmd.Dir, cmd.Env = h.dir, h.env()
	out, err := cmd.CombinedOutput()
	if label != "" {
		os.WriteFile(filepath.Join(h.dir, "pgbench-"+label+".out"), out, 0o644)
	}
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("outside: pgbench %s: %v\n%s", strings.Join(args, " "), err, tail(out))
	}
	return nil
}

// load runs the measuring pgbench through the proxy for d (or until ctx
// ends), its log named label, and returns its transactions.
func (h *hosts) load(ctx context.Context, label string, d time.Duration) ([]Tx, error) {
	host, port, _ := net.SplitHostPort(h.proxyAddr)
	err := h.pgbench(ctx, label, "-n", "-c", strconv.Itoa(h.opt.Clients), "-j", strconv.Itoa(h.opt.Threads), "-R", strconv.FormatFloat(h.opt.Rate, 'f', -1, 64),
		"-T", strconv.Itoa(int(d.Seconds())), "-l", "--log-prefix", label, "-h", host, "-p", port, "-U", "bench", "bench")
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil && label != "migrations" {
		return nil, ctx.Err()
	}
	return h.readLog(label)
}

// readLog reads every thread's log of the pgbench run label.
func (h *hosts) readLog(label string) ([]Tx, error) {
	files, _ := filepath.Glob(filepath.Join(h.dir, label+".*"))
	var all []Tx
	for _, f := range files {
		if strings.HasSuffix(f, ".out") {
			continue
		}
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		txs, cut, err := ParseLog(fh)
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("%w (%s)", err, filepath.Base(f))
		}
		if cut {
			h.cut++
		}
		all = append(all, txs...)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("outside: pgbench run %s logged no transaction", label)
	}
	return all, nil
}

// psql runs sql on the tenant: through the proxy as bench when port is 0,
// else as its superuser over its Unix socket (the operator on its host).
func (h *hosts) psql(ctx context.Context, port int, sql string) error {
	host, p, user, db := h.tenantDir, strconv.Itoa(h.tenantPort), "postgres", "postgres"
	if port == 0 {
		host, p, _ = net.SplitHostPort(h.proxyAddr)
		user, db = "bench", "bench"
	}
	cmd := exec.CommandContext(ctx, filepath.Join(pgcluster.DefaultBinDir, "psql"), "-X", "-q", "-h", host, "-p", p, "-U", user, "-d", db, "-c", sql)
	cmd.Env = h.env()
	return cmd.Run()
}

// env is the environment of the processes the run starts: tokens
// registered under the run's directory, bench's password for libpq.
func (h *hosts) env() []string {
	return append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(h.dir, "config"), "PGPASSWORD="+h.password)
}

// agentClient returns a client of agent i carrying its token (made at its
// first start in its root, as the CLI would find it); nil before it exists.
func (h *hosts) agentClient(i int) *agentclient.Client {
	c, err := agentclient.New(h.agents[i])
	if err != nil {
		return nil
	}
	tok, _ := auth.Read(filepath.Join(h.dir, []string{"a", "b"}[i], "token"))
	return c.WithToken(tok)
}

// migrate runs `sluice migrate` for m and records what it reported.
func (h *hosts) migrate(ctx context.Context, m *Migration) error {
	from := h.agents[map[string]int{"a": 0, "b": 1}[m.From]]
	args := []string{"migrate", "--agent", from, "--tenant", strconv.FormatInt(h.tenant, 10), "--to", m.To, "--json"}
	if m.Controlled {
		args = append(args, "--setpoint", fmt.Sprintf("%.3fms", m.SetpointMs))
	}
	cmd := exec.CommandContext(ctx, h.opt.Binary, args...)
	cmd.Env = h.env()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	m.start = time.Now()
	out, err := cmd.Output()
	m.end = time.Now()
	if err != nil {
		return fmt.Errorf("outside: sluice %s: %v\n%s%s", strings.Join(args, " "), err, out, tail([]byte(stderr.String())))
	}
	var r struct {
		Outcome  string  `json:"outcome"`
		Bytes    int64   `json:"bytes"`
		FreezeMS float64 `json:"freeze_ms"`
	}
	if err := json.Unmarshal(out, &r); err != nil || r.Outcome != "committed" {
		return fmt.Errorf("outside: migration %s → %s: %s (%v)", m.From, m.To, out, err)
	}
	m.Seconds, m.Bytes, m.FreezeMs = round(m.end.Sub(m.start).Seconds(), 1), r.Bytes, r.FreezeMS
	return nil
}

// waitAgent waits until the agent client() names answers.
func waitAgent(ctx context.Context, client func() *agentclient.Client) error {
	for end := time.Now().Add(30 * time.Second); ; {
		c := client()
		if _, err := c.Info(ctx); err == nil {
			return nil
		} else if time.Now().After(end) {
			return fmt.Errorf("outside: agent %s did not start: %w", c.URL(), err)
		}
		if err := clock.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// freePorts returns n distinct free TCP ports.
func freePorts(n int) ([]int, error) {
	var out []int
	for len(out) < n {
		p, err := pgcluster.FreePort()
		if err != nil {
			return nil, err
		}
		dup := false
		for _, q := range out {
			dup = dup || q == p
		}
		if !dup {
			out = append(out, p)
		}
	}
	return out, nil
}

func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}
