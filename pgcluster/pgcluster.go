// Package pgcluster creates, starts and stops PostgreSQL 15 clusters (one
// postmaster and its data directory) on this host.
//
// It is the thin adapter between sluice and the PostgreSQL binaries: initdb,
// pg_ctl and friends. initdb and postgres refuse to run as root, so when the
// calling process is root every PostgreSQL binary is run as the OS user
// Options.OSUser (default "postgres") and the data directory is given to it.
//
// A postmaster started by Start is detached (pg_ctl start): it outlives the
// calling process, as a tenant must outlive an agent restart. Callers that own a
// cluster only for a while (tests) must Stop it.
//
// Cluster values are safe for concurrent use once created; the methods do not
// keep state beyond the fields.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultBinDir is where Debian's postgresql-15 package installs its binaries.
const DefaultBinDir = "/usr/lib/postgresql/15/bin"

// ErrNotRunning is returned by operations that need a running postmaster.
var ErrNotRunning = errors.New("pgcluster: server is not running")

// Options describe a cluster. The zero value is usable: Debian's PostgreSQL 15,
// 127.0.0.1, trust authentication, superuser "postgres", a free port.
type Options struct {
	// BinDir holds initdb, pg_ctl, postgres. Default DefaultBinDir.
	BinDir string
	// Port the postmaster listens on. 0 picks a free port at Init.
	Port int
	// ListenAddr is listen_addresses. Default "127.0.0.1".
	ListenAddr string
	// SuperUser is the bootstrap superuser's name. Default "postgres".
	SuperUser string
	// Password, if set, is the superuser's password (stored as SCRAM-SHA-256).
	Password string
	// AuthMethod for host connections in pg_hba.conf: "trust" (default),
	// "scram-sha-256" or "md5". Local (unix socket) connections are always trust
	// for the OS user running the cluster.
	AuthMethod string
	// Settings are extra postgresql.conf parameters, e.g. "shared_buffers": "32MB".
	// Values are raw (unquoted); sluice quotes those that need it. Written in
	// sorted order to sluice.conf, included after initdb's defaults, so they win.
	Settings map[string]string
	// OSUser runs the binaries when the caller is root. Default "postgres".
	OSUser string
	// Secure, if set, writes the pg_hba.conf of a cluster sluice serves to
	// others (an agent's tenant) instead of the trust one, and AuthMethod is
	// ignored: the superuser logs in only over the Unix socket (in Dir, mode
	// 0700) with peer authentication, mapped (pg_ident.conf map "sluice")
	// from OSUser and from the OS user of the calling process; never over
	// TCP. Over TCP, replication only as ReplicationRole and other roles
	// with scram-sha-256; ReplicationRole may not log in to a database.
	Secure bool
	// TLS, if set, makes the server speak TLS (ssl = on) with TLS.Cert and
	// TLS.Key (PEM files the OS user can read, the key mode 0600), checking
	// client certificates against TLS.CA; with Secure, replication over TCP
	// then requires TLS and a client certificate of TLS.CA besides the
	// password (hostssl … clientcert=verify-ca; without TLS it is refused).
	TLS *TLSFiles
	// WALSegSizeMB is initdb's --wal-segsize in MiB (a power of 2, 1..1024);
	// 0 = PostgreSQL's default 16. Small segments shorten a promotion, which
	// copies the last segment to the new timeline: 1 MiB halves a
	// handover's freeze (docs/results.md, the handover benchmark).
	WALSegSizeMB int
}

// TLSFiles are the PEM files of a server's TLS (Options.TLS), or of a
// client's (StandbyTLS).
type TLSFiles struct {
	Cert, Key, CA string
}

// Cluster is one PostgreSQL data directory and the postmaster serving it.
type Cluster struct {
	Dir  string  // data directory (absolute)
	Port int     // TCP port
	Host string  // listen address, for client connections
	opts Options // defaults filled
}

func (o Options) withDefaults() Options {
	if o.BinDir == "" {
		o.BinDir = DefaultBinDir
	}
	if o.ListenAddr == "" {
		o.ListenAddr = "127.0.0.1"
	}
	if o.SuperUser == "" {
		o.SuperUser = "postgres"
	}
	if o.AuthMethod == "" {
		o.AuthMethod = "trust"
	}
	if o.OSUser == "" {
		o.OSUser = "postgres"
	}
	return o
}

// Open returns a Cluster for an existing data directory without touching it.
// The port is read from o.Port, or else from the directory's sluice.conf.
func Open(dir string, o Options) (*Cluster, error) {
	o = o.withDefaults()
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: abs, Port: o.Port, Host: o.ListenAddr, opts: o}
	if c.Port == 0 {
		p, err := readConfPort(filepath.Join(abs, "postgresql.conf"))
		if err != nil {
			return nil, fmt.Errorf("pgcluster: open %s: %w", dir, err)
		}
		c.Port = p
	}
	return c, nil
}

// Init runs initdb into dir (which must not exist or be empty), writes the
// settings and pg_hba.conf, and returns the stopped cluster.
func Init(ctx context.Context, dir string, o Options) (*Cluster, error) {
	o = o.withDefaults()
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if o.Port == 0 {
		if o.Port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	c := &Cluster{Dir: abs, Port: o.Port, Host: o.ListenAddr, opts: o}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("pgcluster: init: %w", err)
	}
	if err := c.chown(abs); err != nil {
		return nil, err
	}
	args := []string{"-D", abs, "-U", o.SuperUser, "-E", "UTF8", "--locale=C", "-N", "--auth-local=trust", "--auth-host=" + o.AuthMethod}
	if o.WALSegSizeMB != 0 {
		if o.WALSegSizeMB < 1 || o.WALSegSizeMB > 1024 || o.WALSegSizeMB&(o.WALSegSizeMB-1) != 0 {
			return nil, fmt.Errorf("pgcluster: init: WAL segment size %d MiB is not a power of 2 in 1..1024", o.WALSegSizeMB)
		}
		args = append(args, "--wal-segsize="+strconv.Itoa(o.WALSegSizeMB))
	}
	var pwfile string
	if o.Password != "" {
		f, err := os.CreateTemp("", "sluice-pw-")
		if err != nil {
			return nil, err
		}
		pwfile = f.Name()
		defer os.Remove(pwfile)
		if _, err := f.WriteString(o.Password + "\n"); err != nil {
			f.Close()
			return nil, err
		}
		f.Close()
		if err := c.chown(pwfile); err != nil {
			return nil, err
		}
		args = append(args, "--pwfile="+pwfile)
	}
	if out, err := c.Run(ctx, "initdb", args...); err != nil {
		return nil, fmt.Errorf("pgcluster: initdb %s: %w\n%s", abs, err, tail(out))
	}
	if err := c.compactConf(); err != nil {
		return nil, fmt.Errorf("pgcluster: init: %w", err)
	}
	if err := c.Configure(o.Settings); err != nil {
		return nil, err
	}
	return c, nil
}

// TransientConf is the file of the settings sluice gives a running server
// for a while (SetTransient), included from postgresql.conf after
// sluice.conf. A setting made with ALTER SYSTEM (postgresql.auto.conf, read
// last) still wins over it. Starting the server removes it: transient
// settings do not outlive the postmaster they were given to, even when the
// process that set them died before taking them back.
const TransientConf = "sluice_transient.conf"

// Start starts the postmaster with pg_ctl and waits until it accepts
// connections. The server log goes to Dir/log/postmaster.log.
func (c *Cluster) Start(ctx context.Context) error {
	return c.pgctlStart(ctx, "-w", "-t", "60")
}

// pgctlStart runs pg_ctl start with waitArgs (-w -t N, or -W), the server
// log going to Dir/log/postmaster.log.
func (c *Cluster) pgctlStart(ctx context.Context, waitArgs ...string) error {
	if err := c.SetTransient(nil); err != nil {
		return fmt.Errorf("pgcluster: start %s: %w", c.Dir, err)
	}
	logDir := filepath.Join(c.Dir, "log")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return err
	}
	if err := c.chown(logDir); err != nil {
		return err
	}
	args := append([]string{"start"}, waitArgs...)
	args = append(args, "-D", c.Dir, "-l", filepath.Join(logDir, "postmaster.log"), "-o", "-p "+strconv.Itoa(c.Port))
	out, err := c.Run(ctx, "pg_ctl", args...)
	if err != nil {
		return fmt.Errorf("pgcluster: start %s: %w\n%s%s", c.Dir, err, tail(out), c.LogTail(20))
	}
	return nil
}

// StartRecovering starts the postmaster and returns once it is up, without
// waiting for it to accept connections: a standby accepts them only when it
// is consistent, which for a fresh base backup means replaying all the WAL
// written while the backup was taken — minutes when that WAL arrives at a
// throttled rate, past pg_ctl's wait. The postmaster's status in
// postmaster.pid tells when it is up; it must get there within a minute.
func (c *Cluster) StartRecovering(ctx context.Context) error {
	if err := c.pgctlStart(ctx, "-W"); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if st := c.pmStatus(); st == "starting" || st == "standby" || st == "ready" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgcluster: start %s: postmaster not up after a minute\n%s", c.Dir, c.LogTail(20))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: start %s: %w", c.Dir, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// pmStatus returns the postmaster's status line of postmaster.pid (line 8:
// "starting", "stopping", "ready", "standby"), "" when there is none or the
// postmaster is not running.
func (c *Cluster) pmStatus() string {
	b, err := os.ReadFile(filepath.Join(c.Dir, "postmaster.pid"))
	if err != nil || !c.Running() {
		return ""
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 8 {
		return ""
	}
	return strings.TrimSpace(lines[7])
}

// StopMode is pg_ctl's shutdown mode.
type StopMode string

const (
	Smart     StopMode = "smart"     // wait for clients to disconnect
	Fast      StopMode = "fast"      // roll back and disconnect clients, checkpoint
	Immediate StopMode = "immediate" // abort; crash recovery at next start
)

// Stop stops the postmaster with pg_ctl and waits for it to exit.
// Stopping a cluster that is not running returns nil.
func (c *Cluster) Stop(ctx context.Context, mode StopMode) error {
	if !c.Running() {
		return nil
	}
	out, err := c.Run(ctx, "pg_ctl", "stop", "-w", "-t", "60", "-D", c.Dir, "-m", string(mode))
	if err != nil && c.Running() {
		return fmt.Errorf("pgcluster: stop %s: %w\n%s", c.Dir, err, tail(out))
	}
	return nil
}

// Promote asks a standby to become primary without waiting (pg_ctl promote -W).
// Callers poll pg_is_in_recovery() over their own connection.
func (c *Cluster) Promote(ctx context.Context) error {
	out, err := c.Run(ctx, "pg_ctl", "promote", "-W", "-D", c.Dir)
	if err != nil {
		return fmt.Errorf("pgcluster: promote %s: %w\n%s", c.Dir, err, tail(out))
	}
	return nil
}

// Running reports whether postmaster.pid names a live process.
func (c *Cluster) Running() bool {
	pid, err := c.PID()
	if err != nil {
		return false
	}
	return syscall.Kill(pid, 0) == nil
}

// PID returns the postmaster's process id from postmaster.pid.
func (c *Cluster) PID() (int, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, "postmaster.pid"))
	if err != nil {
		return 0, ErrNotRunning
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0, fmt.Errorf("pgcluster: bad postmaster.pid: %w", err)
	}
	return pid, nil
}

// SocketConnString returns a libpq key/value conninfo for database db as
// the superuser over the Unix socket (in Dir): what sluice's own sessions
// use, as a Secure cluster admits the superuser only there.
func (c *Cluster) SocketConnString(db string) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", c.Dir, c.Port, c.opts.SuperUser, db)
}

// ConnString returns a libpq URL for database db as the superuser over TCP.
// The password, if any, is included.
func (c *Cluster) ConnString(db string) string {
	u := c.opts.SuperUser
	if c.opts.Password != "" {
		u += ":" + urlEscape(c.opts.Password)
	}
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", u, net.JoinHostPort(c.Host, strconv.Itoa(c.Port)), db)
}

// Addr returns host:port.
func (c *Cluster) Addr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

// Options returns the options the cluster was created or opened with, defaults filled.
func (c *Cluster) Options() Options { return c.opts }

// Run runs a PostgreSQL binary from BinDir as the cluster's OS user (when the
// caller is root) and returns its combined output.
func (c *Cluster) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.opts.BinDir, name), args...)
	if err := c.asOSUser(cmd); err != nil {
		return nil, err
	}
	cmd.Dir = "/"
	return cmd.CombinedOutput()
}

// Command returns an *exec.Cmd for a PostgreSQL binary (pgbench, psql,
// pg_basebackup…) that runs as the cluster's OS user when the caller is root.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.opts.BinDir, name), args...)
	if err := c.asOSUser(cmd); err != nil {
		return nil, err
	}
	cmd.Dir = "/"
	return cmd, nil
}

// LogTail returns the last n lines of the server log, for error messages.
func (c *Cluster) LogTail(n int) string {
	b, err := os.ReadFile(filepath.Join(c.Dir, "log", "postmaster.log"))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}

// WriteFile writes a file inside the data directory, owned by the OS user.
func (c *Cluster) WriteFile(rel, content string) error { return c.writeFile(rel, content) }

func (c *Cluster) writeFile(rel, content string) error {
	p := filepath.Join(c.Dir, rel)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		return fmt.Errorf("pgcluster: write %s: %w", rel, err)
	}
	return c.chown(p)
}

// FreePort asks the kernel for a free TCP port on loopback. Another process
// may take it before it is used; callers that bind it retry on failure.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WaitReady dials the server until it accepts TCP connections or ctx ends.
func (c *Cluster) WaitReady(ctx context.Context) error {
	for {
		conn, err := net.DialTimeout("tcp", c.Addr(), time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: %s not ready: %w", c.Addr(), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func urlEscape(s string) string {
	var b strings.Builder
	for _, r := range []byte(s) {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || r == '~' {
			b.WriteByte(r)
		} else {
			fmt.Fprintf(&b, "%%%02X", r)
		}
	}
	return b.String()
}

func tail(b []byte) string {
	const max = 2000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}
