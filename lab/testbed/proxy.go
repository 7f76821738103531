package testbed

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/auth"
	"github.com/sluicedb/sluice/internal/certs"
	"github.com/sluicedb/sluice/proxy"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// startProxy starts the bed's proxy — in this process, or as `bin proxy`
// with Options.ProxyProcess — logging to LogDir/proxy.log when
// Options.LogDir is set; Close stops it.
func (b *Bed) startProxy(ctx context.Context, bin string) (err error) {
	if err := b.makeCredentials(); err != nil {
		return err
	}
	if err := b.makeCerts(); err != nil {
		return err
	}
	if dir := b.Opt.LogDir; dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("testbed: logs: %w", err)
		}
		if b.proxyLog, err = os.Create(filepath.Join(dir, "proxy.log")); err != nil {
			return fmt.Errorf("testbed: proxy log: %w", err)
		}
	}
	if b.Opt.ProxyProcess {
		if err := b.startProxyProcess(ctx, bin); err != nil {
			return err
		}
	} else {
		var pctx context.Context
		pctx, b.cancel = context.WithCancel(context.Background())
		pcfg := proxy.Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Users: map[string]string{b.user.Name: b.user.Password},
			TokenFile: b.proxyTokenFile(), ReleaseLimit: b.Opt.ReleaseLimit}
		if b.Opt.FollowCatalogs {
			pcfg.Catalogs, pcfg.CatalogTokenFile, pcfg.TxLog = b.agentURLs(), b.tokenFile, b.proxyTxLog()
		}
		if b.proxyLog != nil {
			pcfg.Logf = b.logProxy
		}
		if b.Proxy, err = proxy.New(pcfg); err != nil {
			return err
		}
		if err := b.Proxy.Start(pctx); err != nil {
			return err
		}
		b.proxyAddr, b.proxyAPIAddr = b.Proxy.Addr(), b.Proxy.APIAddr()
	}
	tok, err := auth.Read(b.proxyTokenFile())
	if err != nil {
		return fmt.Errorf("testbed: the proxy's token: %w", err)
	}
	var hc *http.Client
	if b.certs != nil {
		if hc, err = b.certs.httpClient(); err != nil {
			return err
		}
	}
	b.ProxyAPI = proxyclient.New(b.scheme()+"://"+b.proxyAPIAddr, hc).WithToken(tok)
	for _, p := range b.extraProxies {
		p.client = proxyclient.New(b.scheme()+"://"+p.api, hc).WithToken(tok)
	}
	return nil
}

// proxyStartTimeout bounds the wait for a proxy subprocess's listen
// addresses.
const proxyStartTimeout = 30 * time.Second

// proxyProc is a proxy subprocess.
type proxyProc struct {
	cmd       *exec.Cmd
	exit      chan struct{} // closed when cmd has exited
	log       *os.File      // its log when the bed owns it (extra proxies)
	addr, api string        // host:port of its client and API listeners
	client    *proxyclient.Client
}

// startProxyProcess starts the bed's proxy, and Options.Proxies-1 more
// beside it, as subprocesses.
func (b *Bed) startProxyProcess(ctx context.Context, bin string) error {
	var logw io.Writer = b.proxyLog
	if b.proxyLog == nil {
		lf, err := os.Create(filepath.Join(b.root, "proxy.log"))
		if err != nil {
			return fmt.Errorf("testbed: proxy log: %w", err)
		}
		b.proxyLog, logw = lf, lf
	}
	p, err := b.startProxyProc(ctx, bin, "proxy", logw)
	if p != nil {
		b.proxyCmd, b.proxyExit = p.cmd, p.exit
	}
	if err != nil {
		return err
	}
	b.proxyAddr, b.proxyAPIAddr = p.addr, p.api
	for i := 2; i <= b.Opt.Proxies; i++ {
		name := fmt.Sprintf("proxy-%d", i)
		dir := b.Opt.LogDir
		if dir == "" {
			dir = b.root
		}
		lf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			return fmt.Errorf("testbed: proxy log: %w", err)
		}
		p, err := b.startProxyProc(ctx, bin, name, lf)
		if p != nil {
			p.log = lf
			b.extraProxies = append(b.extraProxies, p)
		} else {
			lf.Close()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// startProxyProc starts `bin proxy` on free ports (in ProxyHost, if any)
// with no route (the bed sets them through its API, as for the in-process
// proxy), logging to logw, and reads its addresses.
func (b *Bed) startProxyProc(ctx context.Context, bin, name string, logw io.Writer) (*proxyProc, error) {
	routes := filepath.Join(b.root, name+"-routes.json")
	if err := os.WriteFile(routes, []byte("[]\n"), 0o644); err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	users := filepath.Join(b.root, "proxy-users.txt")
	if err := os.WriteFile(users, []byte(fmt.Sprintf("%q %q\n", b.user.Name, b.user.Password)), 0o600); err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	host := "127.0.0.1"
	if b.Opt.ProxyHost != nil {
		host = b.Opt.ProxyHost.Addr
	}
	listen := net.JoinHostPort(host, "0")
	args := []string{"proxy", "--auth-file", users, "--token-file", b.proxyTokenFile(), "--listen", listen, "--api", listen, "--routes", routes, "--json"}
	if b.Opt.ReleaseLimit > 0 {
		args = append(args, "--release-limit", strconv.Itoa(b.Opt.ReleaseLimit))
	}
	if b.Opt.FollowCatalogs {
		for _, u := range b.agentURLs() {
			args = append(args, "--catalog", u)
		}
		args = append(args, "--catalog-token-file", b.tokenFile, "--txlog", b.proxyTxLog())
	}
	if b.Opt.Catalog != "" {
		args = append(args, "--catalog", b.Opt.Catalog)
	}
	if b.certs != nil {
		f, err := b.certs.issue(b.root, certs.Request{Name: name, Hosts: []string{host}})
		if err != nil {
			return nil, err
		}
		args = append(args, "--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA)
	}
	cmd := b.command(-1, bin, args...)
	cmd.Stderr = logw
	// Its own process group, as the agents': a ^C reaches the bench, which
	// stops the proxy last.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("testbed: proxy: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testbed: start proxy: %w", err)
	}
	p := &proxyProc{cmd: cmd, exit: make(chan struct{})}
	addrs := make(chan map[string]string, 1)
	go func() {
		// The JSON object with the addresses, then drain stdout so the
		// proxy never blocks writing to it.
		br := bufio.NewReader(out)
		var a map[string]string
		if json.NewDecoder(br).Decode(&a) == nil {
			addrs <- a
		}
		io.Copy(io.Discard, br)
		cmd.Wait()
		close(p.exit)
	}()
	select {
	case a := <-addrs:
		p.addr, p.api = a["listen"], a["api"]
		if p.addr == "" || p.api == "" {
			return p, fmt.Errorf("testbed: %s printed no listen addresses (%v)", name, a)
		}
		return p, nil
	case <-p.exit:
		return p, fmt.Errorf("testbed: %s exited at start; see its log", name)
	case <-time.After(proxyStartTimeout):
		return p, fmt.Errorf("testbed: %s printed no address within %v", name, proxyStartTimeout)
	case <-ctx.Done():
		return p, ctx.Err()
	}
}

// stop stops p (SIGTERM, SIGKILL after 10 s) and closes its log.
func (p *proxyProc) stop() error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exit:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.exit
	}
	if p.log != nil {
		return p.log.Close()
	}
	return nil
}

// ProxyAddrs are the client listen addresses of every proxy of the bed
// (Options.Proxies), the bed's own first.
func (b *Bed) ProxyAddrs() []string {
	out := []string{b.proxyAddr}
	for _, p := range b.extraProxies {
		out = append(out, p.addr)
	}
	return out
}

// proxyAPIs are the API clients of every proxy of the bed, ProxyAPI first.
func (b *Bed) proxyAPIs() []*proxyclient.Client {
	out := []*proxyclient.Client{b.ProxyAPI}
	for _, p := range b.extraProxies {
		out = append(out, p.client)
	}
	return out
}

// setRoute sets r on every proxy of the bed.
func (b *Bed) setRoute(ctx context.Context, r proxyclient.Route) error {
	for _, c := range b.proxyAPIs() {
		if err := c.SetRoute(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// ProxyAddr is the proxy's client listen address, host:port.
func (b *Bed) ProxyAddr() string { return b.proxyAddr }

// ProxyPID is the proxy subprocess's process id (Options.ProxyProcess); 0
// when the proxy runs in this process.
func (b *Bed) ProxyPID() int {
	if b.proxyCmd == nil {
		return 0
	}
	return b.proxyCmd.Process.Pid
}

// stopProxy stops the proxy (a subprocess: SIGTERM, SIGKILL after 10 s)
// and closes its log.
func (b *Bed) stopProxy() error {
	if b.cancel != nil {
		b.cancel()
	}
	if b.Proxy != nil {
		b.Proxy.Close()
		b.Proxy = nil
	}
	if b.proxyCmd != nil {
		b.proxyCmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.proxyExit:
		case <-time.After(10 * time.Second):
			b.proxyCmd.Process.Kill()
			<-b.proxyExit
		}
		b.proxyCmd = nil
	}
	var errs []error
	for _, p := range b.extraProxies {
		errs = append(errs, p.stop())
	}
	b.extraProxies = nil
	if b.proxyLog == nil {
		return errors.Join(errs...)
	}
	b.logMu.Lock()
	defer b.logMu.Unlock()
	errs = append(errs, b.proxyLog.Close())
	b.proxyLog = nil
	return errors.Join(errs...)
}

// logProxy appends one line, stamped with the time in ms, to proxy.log.
func (b *Bed) logProxy(format string, args ...any) {
	b.logMu.Lock()
	defer b.logMu.Unlock()
	if b.proxyLog != nil {
		fmt.Fprintf(b.proxyLog, "%s %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
}

// agentURLs are the agents' API base URLs, in server order.
func (b *Bed) agentURLs() []string {
	out := make([]string, len(b.agentPorts))
	for i, p := range b.agentPorts {
		out[i] = b.scheme() + "://" + net.JoinHostPort(b.serverHost(i), strconv.Itoa(p))
	}
	return out
}

// proxyTxLog is the proxy's two-phase commit decision log (FollowCatalogs).
func (b *Bed) proxyTxLog() string { return filepath.Join(b.root, "proxy.txlog") }

// proxyTokenFile is where the bed's proxy keeps its API token (created at
// its first start).
func (b *Bed) proxyTokenFile() string { return filepath.Join(b.root, "proxy.token") }

// makeCredentials makes the bed's secrets under its root: one API token all
// its agents require and send each other (agent.Config token_file and
// peer_token_file), and the tenants' user, which clients log in as through
// the proxy.
func (b *Bed) makeCredentials() error {
	tok, err := auth.New()
	if err != nil {
		return err
	}
	b.tokenFile = filepath.Join(b.root, "agents.token")
	if err := os.WriteFile(b.tokenFile, []byte(tok+"\n"), 0o600); err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	b.token = tok
	pw, err := auth.New()
	if err != nil {
		return err
	}
	b.user = agentclient.User{Name: "bench", Password: pw[:24]}
	return nil
}
