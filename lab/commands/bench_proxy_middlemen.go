package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicedb/sluice/pgcluster"
)

// startPgbouncer runs PgBouncer in session mode in front of pgAddr, as the
// PostgreSQL OS user when root, and returns its port and a stop function.
func startPgbouncer(ctx context.Context, bin, dir, userlist, pgAddr string, uid, gid int, asRoot bool) (int, int, func(), error) {
	port, err := pgcluster.FreePort()
	if err != nil {
		return 0, 0, nil, err
	}
	host, pgPort, _ := net.SplitHostPort(pgAddr)
	ini := filepath.Join(dir, "pgbouncer.ini")
	conf := fmt.Sprintf(`[databases]
bench = host=%s port=%s dbname=postgres user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = scram-sha-256
auth_file = %s
pool_mode = session
max_client_conn = 200
default_pool_size = 50
logfile = %s
pidfile = %s
`, host, pgPort, port, userlist, filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	if err := os.WriteFile(ini, []byte(conf), 0o600); err != nil {
		return 0, 0, nil, err
	}
	if asRoot {
		os.Chown(ini, uid, gid)
	}
	cmd := exec.CommandContext(ctx, bin, ini)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if asRoot {
		cmd.SysProcAttr = sysProcAs(uid, gid)
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, nil, fmt.Errorf("bench proxy: start pgbouncer: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop := func() { interruptThenKill(cmd.Process, exited) }
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			conn.Close()
			return port, cmd.Process.Pid, stop, nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			return 0, 0, nil, fmt.Errorf("bench proxy: pgbouncer exited: %s%s", stderr.String(), log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return 0, 0, nil, errors.New("bench proxy: pgbouncer did not start listening")
		}
	}
}

// sysProcAs returns process attributes that run a child as uid/gid.
func sysProcAs(uid, gid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
}

// startSluiceProxy runs this binary's `proxy` command as a child process
// (SCRAM from userlist, GOMAXPROCS procs, what it routes in args: --route,
// --keyspace, …) and returns its client port, its pid and a stop function.
// Its log is dir/sluice-proxy.log.
func startSluiceProxy(ctx context.Context, dir, userlist string, procs int, args ...string) (string, int, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return "", 0, nil, fmt.Errorf("bench: find own binary: %w", err)
	}
	logf, err := os.Create(filepath.Join(dir, "sluice-proxy.log"))
	if err != nil {
		return "", 0, nil, err
	}
	args = append([]string{"proxy", "--listen", "127.0.0.1:0", "--api", "127.0.0.1:0",
		"--auth-file", userlist, "--procs", strconv.Itoa(procs), "--quiet", "--json"}, args...)
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Dir = dir
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return "", 0, nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", 0, nil, fmt.Errorf("bench: start sluice proxy: %w", err)
	}
	exited := make(chan struct{})
	stop := func() {
		interruptThenKill(cmd.Process, exited)
		logf.Close()
	}
	var addrs struct {
		Listen string `json:"listen"`
	}
	decErr := json.NewDecoder(stdout).Decode(&addrs)
	go func() { io.Copy(io.Discard, stdout); cmd.Wait(); close(exited) }()
	if decErr != nil {
		stop()
		log, _ := os.ReadFile(logf.Name())
		return "", 0, nil, fmt.Errorf("bench: sluice proxy did not report its address: %v\n%s", decErr, log)
	}
	_, port, err := net.SplitHostPort(addrs.Listen)
	if err != nil {
		stop()
		return "", 0, nil, fmt.Errorf("bench: sluice proxy address %q: %w", addrs.Listen, err)
	}
	return port, cmd.Process.Pid, stop, nil
}

// interruptThenKill interrupts p, kills it if it has not exited (closed
// exited) within 5 s, and waits until it has.
func interruptThenKill(p *os.Process, exited <-chan struct{}) {
	p.Signal(os.Interrupt)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		p.Kill()
		<-exited
	}
}
