package testbed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/auth"
	"github.com/sluicedb/sluice/proxy"
)

// startProxy starts the bed's proxy, logging to LogDir/proxy.log when
// Options.LogDir is set; Close stops it.
func (b *Bed) startProxy() (err error) {
	var pctx context.Context
	pctx, b.cancel = context.WithCancel(context.Background())
	if err := b.makeCredentials(); err != nil {
		return err
	}
	pcfg := proxy.Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Users: map[string]string{b.user.Name: b.user.Password},
		TokenFile: filepath.Join(b.root, "proxy.token"), ReleaseLimit: b.Opt.ReleaseLimit}
	if dir := b.Opt.LogDir; dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("testbed: logs: %w", err)
		}
		if b.proxyLog, err = os.Create(filepath.Join(dir, "proxy.log")); err != nil {
			return fmt.Errorf("testbed: proxy log: %w", err)
		}
		pcfg.Logf = b.logProxy
	}
	if b.Proxy, err = proxy.New(pcfg); err != nil {
		return err
	}
	if err := b.Proxy.Start(pctx); err != nil {
		return err
	}
	b.ProxyAPI = b.Proxy.APIClient()
	return nil
}

// stopProxy stops the proxy and closes its log.
func (b *Bed) stopProxy() error {
	if b.cancel != nil {
		b.cancel()
	}
	if b.Proxy != nil {
		b.Proxy.Close()
		b.Proxy = nil
	}
	if b.proxyLog == nil {
		return nil
	}
	b.logMu.Lock()
	defer b.logMu.Unlock()
	err := b.proxyLog.Close()
	b.proxyLog = nil
	return err
}

// logProxy appends one line, stamped with the time in ms, to proxy.log.
func (b *Bed) logProxy(format string, args ...any) {
	b.logMu.Lock()
	defer b.logMu.Unlock()
	if b.proxyLog != nil {
		fmt.Fprintf(b.proxyLog, "%s %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
}

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
