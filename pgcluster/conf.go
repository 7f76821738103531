package pgcluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// The cluster's configuration files: sluice.conf, the transient settings,
// pg_hba.conf.

// compactConf rewrites initdb's postgresql.conf without its comment and
// blank lines (nearly all of the file; the settings are the same). The
// postmaster and every auxiliary process parse the file again on each reload, and the read-only fence reloads inside the handover's freeze.
// On an idle server one reload costs about half the CPU with the compact
// file (BenchmarkReloadCPU); a quarter-core server needs four times that CPU
// in wall time.
func (c *Cluster) compactConf() error {
	b, err := os.ReadFile(filepath.Join(c.Dir, "postgresql.conf"))
	if err != nil {
		return err
	}
	var out strings.Builder
	out.WriteString("# initdb's settings, comments removed by sluice (see postgresql.conf.sample)\n")
	for _, line := range strings.Split(string(b), "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		out.WriteString(line + "\n")
	}
	return c.writeFile("postgresql.conf", out.String())
}

// Configure writes sluice.conf (port, listen address, socket directory and
// settings) and includes it from postgresql.conf, then rewrites pg_hba.conf.
// Safe to call again: sluice.conf is replaced and the include is added once.
// A running server must be restarted or reloaded to see changes.
func (c *Cluster) Configure(settings map[string]string) error {
	all := map[string]string{
		"port":                    strconv.Itoa(c.Port),
		"listen_addresses":        quoteConf(c.Host),
		"unix_socket_directories": quoteConf(c.Dir),
		"wal_level":               "replica",
		"max_wal_senders":         "10",
		"max_replication_slots":   "10",
		"hot_standby":             "on",
	}
	for k, v := range settings {
		all[k] = v
	}
	if t := c.opts.TLS; t != nil {
		all["ssl"] = "on"
		all["ssl_cert_file"], all["ssl_key_file"], all["ssl_ca_file"] = t.Cert, t.Key, t.CA
		all["ssl_min_protocol_version"] = "TLSv1.2"
	}
	keys := make([]string, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# written by sluice; edits are replaced\n")
	for _, k := range keys {
		v := all[k]
		if k != "listen_addresses" && k != "unix_socket_directories" && needsQuote(v) {
			v = quoteConf(v)
		}
		fmt.Fprintf(&b, "%s = %s\n", k, v)
	}
	if err := c.writeFile("sluice.conf", b.String()); err != nil {
		return err
	}
	conf := filepath.Join(c.Dir, "postgresql.conf")
	cur, err := os.ReadFile(conf)
	if err != nil {
		return fmt.Errorf("pgcluster: configure: %w", err)
	}
	if !bytes.Contains(cur, []byte("include_if_exists = 'sluice.conf'")) {
		cur = append(cur, []byte("\ninclude_if_exists = 'sluice.conf'\n")...)
		if err := c.writeFile("postgresql.conf", string(cur)); err != nil {
			return err
		}
	}
	if c.opts.Secure {
		return c.writeSecureHBA()
	}
	m := c.opts.AuthMethod
	hba := "# written by sluice\n" +
		"local all all trust\n" +
		"local replication all trust\n" +
		"host all all 127.0.0.1/32 " + m + "\n" +
		"host all all ::1/128 " + m + "\n" +
		"host replication all 127.0.0.1/32 " + m + "\n" +
		"host replication all ::1/128 " + m + "\n"
	if c.Host != "127.0.0.1" && c.Host != "localhost" {
		hba += "host all all 0.0.0.0/0 " + m + "\nhost replication all 0.0.0.0/0 " + m + "\n"
	}
	return c.writeFile("pg_hba.conf", hba)
}

// ReplicationRole is the role a Secure cluster's standbys stream as: it may
// replicate (REPLICATION LOGIN) over TCP with scram-sha-256 (and, with
// Options.TLS, only over TLS with a client certificate of its CA), and
// nothing else. Its password is set by whoever runs the cluster (the agent).
const ReplicationRole = "sluice_replication"

// writeSecureHBA writes Options.Secure's pg_hba.conf and pg_ident.conf.
func (c *Cluster) writeSecureHBA() error {
	su := c.opts.SuperUser
	nets := []string{"127.0.0.1/32", "::1/128"}
	if c.Host != "127.0.0.1" && c.Host != "localhost" {
		nets = append(nets, "0.0.0.0/0", "::/0")
	}
	var b strings.Builder
	b.WriteString("# written by sluice (Options.Secure); edits are replaced\n")
	fmt.Fprintf(&b, "local all %s peer map=sluice\n", su)
	fmt.Fprintf(&b, "local replication %s peer map=sluice\n", su)
	for _, n := range nets {
		fmt.Fprintf(&b, "host all %s %s reject\n", su, n)
		fmt.Fprintf(&b, "host replication %s %s reject\n", su, n)
		fmt.Fprintf(&b, "host all %s %s reject\n", ReplicationRole, n)
		if c.opts.TLS != nil {
			fmt.Fprintf(&b, "hostnossl replication %s %s reject\n", ReplicationRole, n)
			fmt.Fprintf(&b, "hostssl replication %s %s scram-sha-256 clientcert=verify-ca\n", ReplicationRole, n)
		} else {
			fmt.Fprintf(&b, "host replication %s %s scram-sha-256\n", ReplicationRole, n)
		}
		fmt.Fprintf(&b, "host all all %s scram-sha-256\n", n)
	}
	if err := c.writeFile("pg_hba.conf", b.String()); err != nil {
		return err
	}
	osUsers := []string{c.opts.OSUser}
	if u, err := user.Current(); err == nil && u.Username != c.opts.OSUser {
		osUsers = append(osUsers, u.Username)
	}
	var id strings.Builder
	id.WriteString("# written by sluice (Options.Secure): OS users that may log in as the superuser\n")
	for _, u := range osUsers {
		fmt.Fprintf(&id, "sluice %s %s\n", u, su)
	}
	return c.writeFile("pg_ident.conf", id.String())
}

// SetTransient writes settings to TransientConf, adding its include to
// postgresql.conf once (after sluice.conf's, so they win over it); no
// settings removes the file (none there is fine). The server sees the change
// at its next reload, of every process (pg_reload_conf) or of the one that
// reads the setting. Values are written as given, quoted when they need it.
func (c *Cluster) SetTransient(settings map[string]string) error {
	p := filepath.Join(c.Dir, TransientConf)
	if len(settings) == 0 {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("pgcluster: remove %s: %w", TransientConf, err)
		}
		return nil
	}
	conf := filepath.Join(c.Dir, "postgresql.conf")
	cur, err := os.ReadFile(conf)
	if err != nil {
		return fmt.Errorf("pgcluster: set transient settings: %w", err)
	}
	line := "include_if_exists = '" + TransientConf + "'"
	if !bytes.Contains(cur, []byte(line)) {
		cur = append(cur, []byte("\n"+line+"\n")...)
		if err := c.writeFile("postgresql.conf", string(cur)); err != nil {
			return err
		}
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# written by sluice for a while (pgcluster.TransientConf); removed after\n")
	for _, k := range keys {
		v := settings[k]
		if needsQuote(v) {
			v = quoteConf(v)
		}
		fmt.Fprintf(&b, "%s = %s\n", k, v)
	}
	return c.writeFile(TransientConf, b.String())
}

func readConfPort(path string) (int, error) {
	for _, f := range []string{filepath.Join(filepath.Dir(path), "sluice.conf"), path} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, "=")
			if !ok || strings.TrimSpace(k) != "port" {
				continue
			}
			v, _, _ = strings.Cut(v, "#")
			if p, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				return p, nil
			}
		}
	}
	return 0, errors.New("no port setting found")
}

func needsQuote(v string) bool {
	if v == "" {
		return true
	}
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return false
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.') {
			return true
		}
	}
	return false
}

func quoteConf(v string) string { return "'" + strings.ReplaceAll(v, "'", "''") + "'" }

// TLSSettings are the settings Configure writes for Options.TLS: a received
// data directory's copy of them names the old host's files.
var TLSSettings = []string{"ssl", "ssl_cert_file", "ssl_key_file", "ssl_ca_file", "ssl_min_protocol_version"}

// StandbyTLS returns the libpq conninfo fields of a standby that streams
// over TLS with client certificate f, checking the server's certificate
// against f.CA and its host name (verify-full); "" for nil f.
func StandbyTLS(f *TLSFiles) string {
	if f == nil {
		return ""
	}
	return fmt.Sprintf("sslmode=verify-full sslrootcert=%s sslcert=%s sslkey=%s", f.CA, f.Cert, f.Key)
}
