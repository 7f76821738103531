package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"regexp"
	"strconv"

	"github.com/sluicedb/sluice/pgcluster"
)

// The checks of a Config that need the host, not only the file: the listen
// address and its transport (tls.go), the PostgreSQL OS user and the tenant
// settings. New runs them
// after withDefaults and before it creates anything, so that a bad config
// leaves no root, catalog or tenant behind.

// hostnameRE is what a listen host that is not an IP address may be.
var hostnameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$`)

// checkListen checks the API's listen address: host:port with a port in
// 0..65535 (0 picks one) and a host that is empty, an IP address or a name
// that resolves. Whether the port is free is found when binding it.
func checkListen(ctx context.Context, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen %q: want host:port, such as 127.0.0.1:7001", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("listen %q: port %q is not a number in 0..65535", addr, port)
	}
	if host == "" || net.ParseIP(host) != nil {
		return nil
	}
	if !hostnameRE.MatchString(host) {
		return fmt.Errorf("listen %q: host %q is neither an IP address nor a host name", addr, host)
	}
	if _, err := net.DefaultResolver.LookupHost(ctx, host); err != nil {
		return fmt.Errorf("listen %q: host %q does not resolve", addr, host)
	}
	return nil
}

// checkOSUser checks, when the agent runs as root, that the OS user it runs
// PostgreSQL as exists and is not root (postgres refuses to run as root).
// An agent that is not root runs PostgreSQL as itself and ignores os_user.
func checkOSUser(name string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("os_user %q: no such OS user (the agent runs as root and runs PostgreSQL as os_user)", name)
	}
	if u.Uid == "0" {
		return fmt.Errorf("os_user %q: is root, as which PostgreSQL refuses to run", name)
	}
	return nil
}

// checkTenantSettings has PostgreSQL judge the settings every new tenant
// gets (pgcluster.CheckSettings): tenant.shared_buffers and
// tenant.settings; the error names the config field.
func (c Config) checkTenantSettings(ctx context.Context) error {
	s := map[string]string{"shared_buffers": c.Tenant.SharedBuffers}
	for k, v := range c.Tenant.Settings {
		s[k] = v
	}
	err := pgcluster.CheckSettings(ctx, pgcluster.Options{BinDir: c.PGBinDir, OSUser: c.OSUser}, s)
	var se *pgcluster.SettingError
	if !errors.As(err, &se) {
		return err
	}
	field := "tenant.settings." + se.Name
	if _, ok := c.Tenant.Settings[se.Name]; !ok && se.Name == "shared_buffers" {
		field = "tenant.shared_buffers"
	}
	return fmt.Errorf("%s: %s", field, se.Msg)
}

// checkHost runs the checks of the fields that need the host, in the
// order a reader of the config meets them; c has its defaults. Each error
// is one line naming its field.
func (c Config) checkHost(ctx context.Context) (pgVer string, pgMajor int, err error) {
	if err := checkListen(ctx, c.Listen); err != nil {
		return "", 0, err
	}
	if err := c.checkTransport(); err != nil {
		return "", 0, err
	}
	if err := checkOSUser(c.OSUser); err != nil {
		return "", 0, err
	}
	if pgVer, pgMajor, err = pgVersion(c.PGBinDir); err != nil {
		return "", 0, fmt.Errorf("pg_bin_dir %q: %v", c.PGBinDir, err)
	}
	return pgVer, pgMajor, c.checkTenantSettings(ctx)
}
