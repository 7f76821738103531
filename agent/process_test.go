package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/etcdtest"
	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/pgcluster"
)

var sluiceBin struct {
	once sync.Once
	path string
	err  error
}

// buildSluice builds the sluice binary once per test binary.
func buildSluice(t *testing.T) string {
	t.Helper()
	sluiceBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-bin-")
		if err != nil {
			sluiceBin.err = err
			return
		}
		sluiceBin.path = filepath.Join(dir, "sluice")
		out, err := exec.Command("go", "build", "-o", sluiceBin.path, "github.com/sluicedb/sluice/cmd/sluice").CombinedOutput()
		if err != nil {
			sluiceBin.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if sluiceBin.err != nil {
		t.Fatal(sluiceBin.err)
	}
	return sluiceBin.path
}

// proc is a `sluice` subprocess that tests kill and start again with the
// same command line.
type proc struct {
	t     *testing.T
	bin   string
	args  []string
	log   string       // log file (appended across restarts)
	ready func() error // nil once the process serves
	cmd   *exec.Cmd
	exit  chan struct{}
}

// start runs the command and waits up to a minute until ready answers.
func (p *proc) start() {
	p.t.Helper()
	lf, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = lf, lf
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	lf.Close()
	p.exit = make(chan struct{})
	go func(cmd *exec.Cmd, exit chan struct{}) { cmd.Wait(); close(exit) }(p.cmd, p.exit)
	deadline := time.After(time.Minute)
	for p.ready() != nil {
		select {
		case <-p.exit:
			b, _ := os.ReadFile(p.log)
			p.t.Fatalf("sluice %s exited at start:\n%s", p.args[0], b)
		case <-deadline:
			p.t.Fatalf("sluice %s did not come up", p.args[0])
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// kill9 kills the process with SIGKILL (an agent's tenant postmasters,
// detached, keep running).
func (p *proc) kill9() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exit
}

func (p *proc) stop() {
	if p.cmd != nil && p.cmd.ProcessState == nil {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exit:
		case <-time.After(15 * time.Second):
			p.kill9()
		}
	}
}

// procAgent is a `sluice agent` subprocess.
type procAgent struct {
	proc
	cfg string // config file
	url string
	c   *client.Client
}

// procPair starts two `sluice agent` processes that are peers; tenant
// settings add extra to the defaults.
func procPair(t *testing.T, extra map[string]string) (*procAgent, *procAgent) {
	return procPairWith(t, func(i int, c *Config) {
		for k, v := range extra {
			c.Tenant.Settings[k] = v
		}
	})
}

// procPairWith starts two `sluice agent` processes that are peers, after mod
// changed each one's config (i is 0 for the first, 1 for the second).
func procPairWith(t *testing.T, mod func(i int, c *Config)) (*procAgent, *procAgent) {
	ps := procGroup(t, []string{"p1", "p2"}, mod)
	return ps[0], ps[1]
}

// procGroup starts one `sluice agent` process per name, each a peer of all
// the others, after mod changed each one's config (i is its index in names).
func procGroup(t *testing.T, names []string, mod func(i int, c *Config)) []*procAgent {
	bin := buildSluice(t)
	ps := make([]*procAgent, len(names))
	cfgs := make([]Config, len(names))
	for i, name := range names {
		cfgs[i] = newTestConfig(t, name)
		port, _ := pgcluster.FreePort()
		cfgs[i].Listen = fmt.Sprintf("127.0.0.1:%d", port)
		stopTenants(t, cfgs[i].Root)
	}
	zero := Duration(0)
	for i := range cfgs {
		cfgs[i].Peers = map[string]string{}
		for j := range cfgs {
			if j != i {
				cfgs[i].Peers[cfgs[j].Name] = "http://" + cfgs[j].Listen
			}
		}
		mod(i, &cfgs[i])
		cfgs[i].RetireGrace = &zero
		cfgs[i].Logger = nil
		dir := pgtest.TempDir(t)
		path := filepath.Join(dir, cfgs[i].Name+".json")
		b, _ := json.MarshalIndent(cfgs[i], "", "  ")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		c, _ := client.New("http://" + cfgs[i].Listen)
		c = c.WithToken(cfgs[i].Token)
		ps[i] = &procAgent{proc: proc{t: t, bin: bin, args: []string{"agent", "--config", path}, log: filepath.Join(dir, cfgs[i].Name+".log")},
			cfg: path, url: "http://" + cfgs[i].Listen, c: c}
		ps[i].ready = func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := c.Info(ctx)
			return err
		}
		p := ps[i]
		t.Cleanup(func() {
			p.stop()
			if t.Failed() {
				b, _ := os.ReadFile(p.log)
				t.Logf("--- %s log ---\n%s", filepath.Base(p.cfg), b)
			}
		})
		p.start()
	}
	return ps
}

// TestAgentKilledMidMigration kills -9 the source or the target agent process
// during SNAPSHOT or CATCH-UP of a live migration under a steady write
// workload, restarts it, and checks that the migration completes (source
// killed: it resumes; target killed in CATCH-UP: the source's driver waits
// through the outage, and the restarted target re-creates the WAL relay its
// standby streams through) or rolls back (target killed in SNAPSHOT: the
// stream breaks; the source aborts cleanly once the target is back), with
// every acknowledged write present exactly once on whichever side serves
// after. With etcd, the agents share a catalog on a three-member etcd
// cluster: the restarted source finds the tenant's driver lock still held
// by its dead predecessor's lease, waits for the lease to expire, and only
// then resumes.
func TestAgentKilledMidMigration(t *testing.T) {
	for _, tc := range []struct {
		kill    string // "source" or "target"
		phase   string // "snapshot" or "catch-up"
		outcome string
		etcd    bool
	}{
		{"source", "snapshot", "committed", false},
		{"source", "catch-up", "committed", false},
		{"target", "snapshot", "aborted", false},
		{"target", "catch-up", "committed", false},
		{"source", "snapshot", "committed", true},
	} {
		name := tc.kill + "-in-" + tc.phase
		if tc.etcd {
			name += "-etcd"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel() // mostly waiting on throttled copies and restarts
			// A standby that applies commits 2 s late keeps CATCH-UP going
			// (replay lag stays megabytes above the 1 MiB threshold) for as
			// long as the source churns WAL: that is the window in which the
			// agent is killed. (The handover then waits up to 2 s for
			// replay: well inside the driver's 10 s replay timeout.)
			spec := ""
			if tc.etcd {
				spec = "etcd://" + strings.Join(etcdtest.Start(t, 3).Endpoints, ",") + "/fleet"
			}
			p1, p2 := procPairWith(t, func(_ int, c *Config) {
				c.Tenant.Settings["recovery_min_apply_delay"] = "2s"
				c.Catalog = spec
			})
			ctx := ctxT(t)
			tn, err := p1.c.CreateTenant(ctx, client.CreateTenant{Name: "victim", Users: testUsers})
			if err != nil {
				t.Fatal(err)
			}
			var info client.Info
			info, _ = p2.c.Info(ctx)
			srcCS := appConnString(tn.Port)
			var p2cfg Config
			b, _ := os.ReadFile(p2.cfg)
			json.Unmarshal(b, &p2cfg)
			dstCS := appConnString(p2cfg.Tenant.BasePort + int(tn.ID))
			loadData(t, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", tn.Dir, tn.Port), 10)

			w := &ledgerWriter{conns: []string{srcCS, dstCS}, pause: time.Millisecond}
			wctx, wstop := context.WithCancel(context.Background())
			wdone := make(chan struct{})
			go func() { w.run(wctx); close(wdone) }()
			defer func() { wstop(); <-wdone }()
			// WAL churn on the source keeps the delayed standby's replay lag
			// at megabytes until it stops.
			cctx, cstop := context.WithCancel(context.Background())
			cdone := make(chan struct{})
			if tc.phase == "catch-up" {
				go func() { churn(cctx, srcCS); close(cdone) }()
			} else {
				close(cdone)
			}
			defer func() { cstop(); <-cdone }()
			time.Sleep(300 * time.Millisecond)

			rate := 3 << 20
			if tc.phase == "catch-up" {
				rate = 0
			}
			m, err := p1.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: info.Name, Rate: float64(rate)})
			if err != nil {
				t.Fatal(err)
			}
			at := waitMigration(t, p1.c, m.ID, 2*time.Minute, func(v client.Migration) bool {
				if tc.phase == "snapshot" {
					return v.Progress.Phase == "snapshot" && v.Progress.Bytes > 4<<20
				}
				// The standby streams and reports its lag.
				return v.Progress.Phase == "catch-up" && v.Progress.LagBytes > 0
			})
			if at.Done {
				t.Fatalf("migration finished before the kill: outcome %s, progress %+v", at.Outcome, at.Progress)
			}
			if tc.phase == "snapshot" {
				time.Sleep(300 * time.Millisecond)
			}
			victim := p1
			if tc.kill == "target" {
				victim = p2
			}
			victim.kill9()
			t.Logf("killed %s agent in %s (%d bytes, lag %d)", tc.kill, at.Progress.Phase, at.Progress.Bytes, at.Progress.LagBytes)
			time.Sleep(time.Second)
			victim.start()
			// Lift the throttle on the resumed copy (if the source still
			// drives it), then let the catch-up end: the writer gets light.
			for i := 0; i < 100; i++ {
				if _, err := p1.c.SetRate(ctx, m.ID, 0); err == nil || client.StatusOf(err) == 404 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(time.Second)
			cstop()
			<-cdone

			m = waitMigration(t, p1.c, m.ID, 3*time.Minute, nil)
			time.Sleep(300 * time.Millisecond)
			wstop()
			<-wdone
			acked, errs, byHome := w.stats()
			t.Logf("outcome %s (%s); writer: %d acknowledged %v, %d errors", m.Outcome, m.Error, acked, byHome, errs)
			if m.Outcome != tc.outcome {
				t.Fatalf("outcome %s (error %q), want %s", m.Outcome, m.Error, tc.outcome)
			}
			srcT, _ := p1.c.Tenant(ctx, tn.ID)
			dstT, dstErr := p2.c.Tenant(ctx, tn.ID)
			if tc.etcd {
				// The restarted driver waited for the dead one's lease.
				if b, _ := os.ReadFile(p1.log); !strings.Contains(string(b), "driver lock is held") {
					t.Fatalf("the restarted source agent did not wait for its predecessor's lease; its log:\n%s", b)
				}
			}
			if tc.kill == "target" && tc.phase == "catch-up" {
				// The commit needs the standby's WAL past the fence: through
				// a relay the restarted agent made anew.
				if b, _ := os.ReadFile(p2.log); !strings.Contains(string(b), "resumed WAL relay") {
					t.Fatalf("the restarted target agent did not resume the WAL relay; its log:\n%s", b)
				}
			}
			if tc.outcome == "committed" {
				if srcT.State != "moved" || dstErr != nil || dstT.State != "running" || !dstT.Alive {
					t.Fatalf("after commit: source %+v, target %+v (%v)", srcT, dstT, dstErr)
				}
				w.verify(t, dstCS)
			} else {
				if srcT.State != "running" || !srcT.Alive || dstErr == nil {
					t.Fatalf("after abort: source %+v, target %+v (%v)", srcT, dstT, dstErr)
				}
				if _, err := os.Stat(p2cfg.Root + "/tenants/" + fmt.Sprint(tn.ID)); !os.IsNotExist(err) {
					t.Fatalf("target directory left after abort: %v", err)
				}
				w.verify(t, srcCS)
			}
		})
	}
}

// churn rewrites a 10k-row table on the server at cs until ctx ends (or the
// server refuses writes), producing several MB/s of WAL.
func churn(ctx context.Context, cs string) {
	conn, err := pgx.Connect(ctx, cs)
	if err != nil {
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS churn AS SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 10000) g"); err != nil {
		return
	}
	for ctx.Err() == nil {
		if _, err := conn.Exec(ctx, "UPDATE churn SET v = md5(random()::text)"); err != nil {
			return
		}
	}
}
