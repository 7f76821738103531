package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/proxy"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// watchedMigration is a live migration of tenant "acme" from a1 to a2 under
// a write load through the proxy, with a control loop (setpoint 50 ms) and
// a top speed that makes its copy last several seconds: what an operator
// watches.
type watchedMigration struct {
	a1, a2 *testAgent
	px     *proxy.Proxy
	m      client.Migration
	w      *ledgerWriter
	stopW  func()
	tenant int64
}

// startWatchedMigration starts the watched migration under the PID.
func startWatchedMigration(t *testing.T) *watchedMigration {
	t.Helper()
	return startWatchedMigrationWith(t, client.StartMigration{Control: &client.Control{SetpointMs: 50, MaxRate: 4 << 20}})
}

// startWatchedMigrationWith starts acme's migration a1 → a2 as req says
// (its tenant and target filled in) under a ledger writer through the proxy.
func startWatchedMigrationWith(t *testing.T, req client.StartMigration) *watchedMigration {
	t.Helper()
	c1, c2 := agentPair(t)
	px := catalogProxy(t, &c1, c2)
	t.Cleanup(func() { px.Close() })
	a1, a2 := startAgent(t, c1), startAgent(t, c2)
	ctx := ctxT(t)
	tn, err := a1.c.CreateTenant(ctx, client.CreateTenant{Name: "acme", Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	loadData(t, a1.ConnString(tn.Port, ""), 40)
	waitProxyRoute(t, px.APIClient(), "acme", "127.0.0.1:"+strconv.Itoa(tn.Port))
	proxyCS := fmt.Sprintf("postgres://%s:%s@%s/acme?sslmode=disable", testUsers[0].Name, testUsers[0].Password, px.Addr())
	w := &ledgerWriter{conns: []string{proxyCS}, pause: 2 * time.Millisecond}
	wctx, wstop := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() { w.run(wctx); close(wdone) }()
	stop := func() { wstop(); <-wdone }
	t.Cleanup(stop)
	time.Sleep(500 * time.Millisecond)
	req.Tenant, req.To = tn.ID, "a2"
	m, err := a1.c.StartMigration(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return &watchedMigration{a1: a1, a2: a2, px: px, m: m, w: w, stopW: stop, tenant: tn.ID}
}

// waitCopying waits until the snapshot is moving and the control loop has
// recorded n points.
func (wm *watchedMigration) waitCopying(t *testing.T, n int) client.Migration {
	t.Helper()
	m := waitMigration(t, wm.a1.c, wm.m.ID, 2*time.Minute, func(m client.Migration) bool {
		if m.Progress.Phase != string(migration.PhaseSnapshot) || m.Progress.Bytes == 0 || m.Progress.TotalBytes == 0 {
			return false
		}
		pts, err := wm.a1.MigrationSeries(m.ID, -1)
		return err == nil && len(pts) >= n
	})
	if m.Done {
		t.Fatalf("migration ended (%s) before it could be watched copying", m.Outcome)
	}
	return m
}

// finish waits for the migration's end and checks that nothing the clients
// were told was written is lost.
func (wm *watchedMigration) finish(t *testing.T) client.Migration {
	t.Helper()
	m := waitMigration(t, wm.a1.c, wm.m.ID, 3*time.Minute, nil)
	if m.Outcome != "committed" {
		t.Fatalf("migration ended %s: %s", m.Outcome, m.Error)
	}
	wm.stopW()
	wm.w.verify(t, wm.a2.ConnString(wm.a2.TenantPort(wm.tenant), ""))
	return m
}

// chromium returns Debian's chromium, or skips the test when it is not
// installed (scripts/install-deps.sh installs it; CI runs that first).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed (scripts/install-deps.sh installs Debian's chromium): the dashboard's browser test needs it")
	return ""
}

// browser is one headless Chromium tab, driven over the DevTools protocol
// (chromedp) as a person would use the page: it stays open, polls, and its
// buttons are clicked.
type browser struct {
	t   *testing.T
	ctx context.Context
}

func newBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 1500), chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("hide-scrollbars", true))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelB(); cancelA() })
	// The first call starts the browser, which lives as long as its
	// context: no timeout on this one.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return &browser{t: t, ctx: ctx}
}

// run runs steps in the tab, each call bounded to a minute.
func (b *browser) run(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %v", err)
	}
}

// eval evaluates the JavaScript expression js in b's page.
func eval[T any](b *browser, js string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("browser: %s: %v", js, err)
	}
	return v
}

// wait polls the page until the JavaScript expression cond is true.
func (b *browser) wait(what, cond string, timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if eval[bool](b, "!!("+cond+")") {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("page: %s did not happen within %v; the page shows:\n%s", what, timeout, eval[string](b, "document.body.innerText"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestDashboardInBrowser opens the agent's page in headless Chromium as an
// operator would, during a live migration under load, and keeps it open:
// the page alone (no token) asks for the token and shows no data; with the
// token it shows the migration with its phase, bytes of total, latency
// against the setpoint and its chart; its figures move from one second to
// the next; its Pause and Resume buttons pause and resume the copy (the
// API confirms); and when the migration ends its summary (committed, the
// freeze) appears on its card and in the finished table, with the tenant
// now on a2. SLUICE_DASHBOARD_PNG=file saves a screenshot taken during the
// copy.
func TestDashboardInBrowser(t *testing.T) {
	bin := chromium(t)
	wm := startWatchedMigration(t)
	b := newBrowser(t, bin)
	base := wm.a1.URL() + "/ui/"

	// Without the token: the page loads, asks for it, and shows nothing.
	b.run(chromedp.Navigate(base))
	b.wait("the token form", `!document.getElementById('token-form').classList.contains('hidden')`, 10*time.Second)
	if n := eval[int](b, `document.querySelectorAll('section.migration').length`); n != 0 {
		t.Fatalf("page without a token shows %d migrations", n)
	}

	// With it (the fragment sessionStorage keeps; the address bar loses it).
	wm.waitCopying(t, 2)
	b.run(chromedp.Navigate(base + "#token=" + testToken))
	sel := `document.querySelector('section.migration[data-id="` + wm.m.ID + `"]')`
	b.wait("the migration's card", sel+` && `+sel+`.dataset.phase === 'snapshot' && document.body.dataset.updated`, 15*time.Second)
	if href := eval[string](b, `location.href`); strings.Contains(href, "token") {
		t.Errorf("the token stayed in the address bar: %s", href)
	}
	text := eval[string](b, sel+`.innerText`)
	for _, want := range []string{"tenant acme #", "→ a2", " of ", "/ 50.0 ms", "pid"} {
		if !strings.Contains(text, want) {
			t.Fatalf("card during the copy lacks %q:\n%s", want, text)
		}
	}
	b1 := eval[float64](b, `+`+sel+`.dataset.bytes`)
	b.wait("the bytes moving", `+`+sel+`.dataset.bytes > `+strconv.FormatFloat(b1, 'f', -1, 64)+` || `+sel+`.dataset.phase !== 'snapshot'`, 15*time.Second)
	if png := os.Getenv("SLUICE_DASHBOARD_PNG"); png != "" {
		shot, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(png, shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The Pause button pauses the copy; Resume lets it go on.
	if eval[bool](b, `!`+sel+`.querySelector('button[name=pause]').disabled`) {
		b.run(chromedp.Click(chromedp.CSS(`section.migration[data-id="` + wm.m.ID + `"] button[name=pause]`)))
		b.wait("the pause", sel+`.dataset.paused === 'true' || `+sel+`.dataset.phase !== 'snapshot'`, 10*time.Second)
		if m, err := wm.a1.c.Migration(ctxT(t), wm.m.ID); err != nil || (!m.Progress.Paused && m.Progress.Phase == string(migration.PhaseSnapshot)) {
			t.Fatalf("after the Pause button: %v %+v", err, m.Progress)
		}
		b.run(chromedp.Click(chromedp.CSS(`section.migration[data-id="` + wm.m.ID + `"] button[name=resume]`)))
		b.wait("the resume", sel+`.dataset.paused === 'false'`, 10*time.Second)
	} else {
		t.Logf("the copy ended before the Pause button could be tried")
	}

	// The page left open shows the end.
	m := wm.finish(t)
	b.wait("the summary", sel+`.querySelector('.summary').dataset.outcome === 'committed'`, 15*time.Second)
	text = eval[string](b, sel+`.querySelector('.summary').innerText`)
	if want := fmt.Sprintf("freeze at handover %.1f ms", m.Summary.FreezeMS); !strings.Contains(text, want) {
		t.Errorf("summary %q lacks %q", text, want)
	}
	b.wait("the finished row", `document.querySelector('#finished tr[data-id="`+wm.m.ID+`"][data-outcome="committed"]')`, 5*time.Second)
	b.wait("acme on a2", `[...document.querySelectorAll('#tenants tr[data-tenant="acme"]')].some(r => r.cells[2].innerText === 'a2' && r.cells[3].innerText === 'running')`, 10*time.Second)
}

// TestDashboardRateAndAbort: on a migration copying at a fixed rate, the
// page's rate form refuses a rate it cannot read (nothing sent) and sets
// one it can (the API confirms); its Abort button asks first — dismissed,
// nothing happens; accepted, the migration rolls back, the page shows it
// aborted, and the tenant serves on from a1 with every acknowledged write.
func TestDashboardRateAndAbort(t *testing.T) {
	bin := chromium(t)
	wm := startWatchedMigrationWith(t, client.StartMigration{Rate: 1 << 20})
	b := newBrowser(t, bin)
	wm.waitCopying(t, 0)
	b.run(chromedp.Navigate(wm.a1.URL() + "/ui/#token=" + testToken))
	card := `section.migration[data-id="` + wm.m.ID + `"]`
	sel := `document.querySelector('` + card + `')`
	b.wait("the migration's card", sel+` && `+sel+`.dataset.phase === 'snapshot'`, 15*time.Second)
	result := sel + `.querySelector('.actions .result').textContent`

	b.run(chromedp.SetValue(chromedp.CSS(card+` input[name=rate]`), "fast"), chromedp.Click(chromedp.CSS(card+` button[name=set]`)))
	b.wait("the page's refusal", result+`.includes('a rate is e.g.')`, 5*time.Second)
	if m, _ := wm.a1.c.Migration(ctxT(t), wm.m.ID); m.Progress.Limit != 1<<20 {
		t.Fatalf("a refused rate changed the migration's: limit %v", m.Progress.Limit)
	}
	b.run(chromedp.SetValue(chromedp.CSS(card+` input[name=rate]`), "512KiB/s"), chromedp.Click(chromedp.CSS(card+` button[name=set]`)))
	b.wait("the rate set", result+` === 'done'`, 10*time.Second)
	if m, err := wm.a1.c.Migration(ctxT(t), wm.m.ID); err != nil || m.Progress.Limit != 512<<10 {
		t.Fatalf("after Set rate 512KiB/s: limit %v (%v)", m.Progress.Limit, err)
	}

	// Abort asks first: dismissed, then accepted.
	var asked []string
	var mu sync.Mutex
	accept := false
	go func() {
		for ev, err := range chromedp.Events(b.ctx, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			mu.Lock()
			asked = append(asked, ev.Message)
			ok := accept
			mu.Unlock()
			go chromedp.Call(b.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: ok})
		}
	}()
	b.run(chromedp.Click(chromedp.CSS(card + ` button[name=abort]`)))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		n := len(asked)
		mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Abort asked nothing")
		}
	}
	time.Sleep(time.Second) // an abort sent anyway would be under way by now
	if m, _ := wm.a1.c.Migration(ctxT(t), wm.m.ID); m.Done || eval[string](b, result) != "done" {
		t.Fatalf("a dismissed Abort did something: migration done %v (%s), the form says %q", m.Done, m.Outcome, eval[string](b, result))
	}
	mu.Lock()
	accept = true
	mu.Unlock()
	b.run(chromedp.Click(chromedp.CSS(card + ` button[name=abort]`)))
	m := waitMigration(t, wm.a1.c, wm.m.ID, 2*time.Minute, nil)
	if m.Outcome != "aborted" {
		t.Fatalf("after an accepted Abort: %s (%s)", m.Outcome, m.Error)
	}
	mu.Lock()
	if len(asked) != 2 || !strings.Contains(asked[0], "Abort migration "+wm.m.ID) {
		t.Errorf("dialogs %q: want two asking to abort %s", asked, wm.m.ID)
	}
	mu.Unlock()
	b.wait("the card aborted", sel+`.dataset.phase === 'aborted'`, 15*time.Second)
	wm.stopW()
	tn, err := wm.a1.c.Tenant(ctxT(t), wm.tenant)
	if err != nil || tn.State != "running" || !tn.Alive {
		t.Fatalf("tenant after the abort: %+v %v", tn, err)
	}
	wm.w.verify(t, wm.a1.ConnString(tn.Port, ""))
}

// TestOverviewAndMetricsDuringMigration scrapes the agent's GET /metrics
// while a migration copies and checks its series against the API's
// figures, then against the summary once it has finished; both pass the
// Prometheus lint. /metrics and /v1/overview need the token; the page's
// files do not.
func TestOverviewAndMetricsDuringMigration(t *testing.T) {
	wm := startWatchedMigration(t)
	a1 := wm.a1
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest("GET", a1.URL()+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for path, want := range map[string]int{"/metrics": 401, "/v1/overview": 401, "/ui/": 200, "/ui/app.js": 200, "/ui/../v1/tenants": 401} {
		if code, _ := get(path, ""); code != want {
			t.Errorf("GET %s without a token: %d, want %d", path, code, want)
		}
	}

	before := wm.waitCopying(t, 2)
	code, text := get("/metrics", testToken)
	after, err := a1.c.Migration(ctxT(t), wm.m.ID)
	if code != 200 || err != nil {
		t.Fatalf("metrics %d, migration %v", code, err)
	}
	series := parseMetrics(t, text)
	exported := names(series)
	moved := series[`sluice_migration_moved_bytes{tenant="acme"}`]
	if moved < float64(before.Progress.Bytes) || moved > float64(after.Progress.Bytes) {
		t.Errorf("sluice_migration_moved_bytes %v, want between the API's %d and %d", moved, before.Progress.Bytes, after.Progress.Bytes)
	}
	checks := map[string]float64{
		`sluice_migration_phase{phase="snapshot",tenant="acme"}`:               1,
		`sluice_migration_size_bytes{tenant="acme"}`:                           float64(after.Progress.TotalBytes),
		`sluice_migration_setpoint_seconds{tenant="acme"}`:                     0.05,
		`sluice_migration_controller_max_rate_bytes_per_second{tenant="acme"}`: 4 << 20,
		`sluice_migrations_running{role="source"}`:                             1,
		`sluice_migration_paused{tenant="acme"}`:                               0,
		`sluice_agent_tenants{state="migrating-out"}`:                          1,
	}
	for k, want := range checks {
		if got, ok := series[k]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
		}
	}
	if r := series[`sluice_migration_throttle_bytes_per_second{tenant="acme"}`]; r <= 0 || r > 4<<20 {
		t.Errorf("throttle %v, want in (0, 4 MiB/s]", r)
	}
	if r := series[`sluice_migration_controller_rate_bytes_per_second{tenant="acme"}`]; r <= 0 || r > 4<<20 {
		t.Errorf("controller rate %v, want in (0, 4 MiB/s]", r)
	}
	if _, ok := series[`sluice_migration_latency_seconds{tenant="acme"}`]; !ok {
		t.Errorf("no latency series though the proxy measures the writer:\n%s", text)
	}
	ov, err := a1.c.Overview(ctxT(t))
	if err != nil || len(ov.Migrations) == 0 || ov.Migrations[0].ID != wm.m.ID || ov.Migrations[0].Done || ov.Proxy == nil || len(ov.Peers) != 1 {
		t.Fatalf("overview during the copy: %v %+v", err, ov)
	}
	if w := findWindow(ov, "acme"); w == nil || w.Count == 0 {
		t.Errorf("overview: no proxy window of acme with transactions: %+v", ov.Proxy)
	}
	lint(t, a1)

	m := wm.finish(t)
	_, text = get("/metrics", testToken)
	series = parseMetrics(t, text)
	maps.Copy(exported, names(series))
	if got := series[`sluice_migrations_finished_total{outcome="committed"}`]; got != 1 {
		t.Errorf("finished committed %v, want 1", got)
	}
	if got := series[`sluice_migration_freeze_seconds_count{mode="live"}`]; got != 1 {
		t.Errorf("freeze histogram count %v, want 1", got)
	}
	if got, want := series[`sluice_migration_freeze_seconds_sum{mode="live"}`], m.Summary.FreezeMS/1000; math.Abs(got-want) > 1e-6 {
		t.Errorf("freeze sum %v s, want the summary's %v", got, want)
	}
	if got := series[`sluice_migration_finished_moved_bytes_total`]; got != float64(m.Summary.Bytes) {
		t.Errorf("moved bytes total %v, want the summary's %d", got, m.Summary.Bytes)
	}
	if _, ok := series[`sluice_migration_moved_bytes{tenant="acme"}`]; ok {
		t.Errorf("a finished migration still has live series")
	}
	ov, err = a1.c.Overview(ctxT(t))
	if err != nil || len(ov.Migrations) == 0 || !ov.Migrations[0].Done || ov.Migrations[0].Summary == nil || ov.Migrations[0].Record != nil {
		t.Fatalf("overview after: %v %+v", err, ov.Migrations)
	}
	lint(t, a1)

	// The Grafana dashboard in docs/ asks only for series the agent and
	// the proxy export.
	resp, err := http.Get("http://" + wm.px.APIAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	maps.Copy(exported, names(parseMetrics(t, string(body))))
	// Series the agent exports only when known (a standby's lag, an ETA)
	// may be absent from both scrapes: its declared metrics count too.
	maps.Copy(exported, describedNames(a1))
	checkGrafana(t, "../docs/grafana/sluice.json", exported)
}

// describedNames is the set of series names the agent's registry
// declares (a histogram's with its _bucket, _sum and _count).
func describedNames(a *testAgent) map[string]bool {
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		migrationCollector{}.Describe(ch)
		a.metrics.stepFailures.Describe(ch)
		close(ch)
	}()
	out := map[string]bool{}
	re := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		if m := re.FindStringSubmatch(d.String()); m != nil {
			for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
				out[m[1]+suffix] = true
			}
		}
	}
	return out
}

// names is the set of series names (without labels) of a scrape.
func names(series map[string]float64) map[string]bool {
	out := map[string]bool{}
	for k := range series {
		name, _, _ := strings.Cut(k, "{")
		out[name] = true
	}
	return out
}

// checkGrafana checks that file is a Grafana dashboard whose every panel
// has queries and whose every query and template variable names only
// sluice series in exported.
func checkGrafana(t *testing.T, file string, exported map[string]bool) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: not valid JSON: %v", file, err)
	}
	var exprs []string
	queries := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", file, p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
			queries++
		}
	}
	for _, v := range d.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	seriesRE := regexp.MustCompile(`\bsluice_[a-z0-9_]+`)
	for _, e := range exprs {
		found := seriesRE.FindAllString(e, -1)
		if len(found) == 0 {
			t.Errorf("%s: query %q names no sluice series", file, e)
		}
		for _, n := range found {
			if !exported[n] {
				t.Errorf("%s: query %q names %s, which neither the agent nor the proxy exports", file, e, n)
			}
		}
	}
	if queries < 10 {
		t.Errorf("%s: only %d queries", file, queries)
	}
}

func findWindow(ov client.Overview, tenant string) *proxyclient.Window {
	for i := range ov.Proxy.Windows {
		if ov.Proxy.Windows[i].Tenant == tenant {
			return &ov.Proxy.Windows[i]
		}
	}
	return nil
}

// parseMetrics reads the text exposition into series name{labels} → value.
func parseMetrics(t *testing.T, text string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// lint runs the Prometheus lint (promtool check metrics' rules) on the agent's registry.
func lint(t *testing.T, a *testAgent) {
	t.Helper()
	problems, err := testutil.GatherAndLint(a.metrics.reg)
	if err != nil || len(problems) > 0 {
		t.Fatalf("metrics lint: %v %+v", err, problems)
	}
}
