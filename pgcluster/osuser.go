package pgcluster

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// Chown gives path (recursively) to the cluster's OS user when running as root.
func (c *Cluster) Chown(path string) error {
	uid, gid, ok, err := osUserIDs(c.opts.OSUser)
	if err != nil || !ok {
		return err
	}
	return filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

func (c *Cluster) chown(path string) error {
	uid, gid, ok, err := osUserIDs(c.opts.OSUser)
	if err != nil || !ok {
		return err
	}
	return os.Lchown(path, uid, gid)
}

func (c *Cluster) asOSUser(cmd *exec.Cmd) error {
	uid, gid, ok, err := osUserIDs(c.opts.OSUser)
	if err != nil {
		return err
	}
	if ok {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		cmd.Env = append(os.Environ(), "HOME=/tmp", "USER="+c.opts.OSUser, "LOGNAME="+c.opts.OSUser)
	}
	return nil
}

// osUserIDs returns the uid and gid to run PostgreSQL as; ok is false when the
// caller is not root (binaries run as the caller).
func osUserIDs(name string) (uid, gid int, ok bool, err error) {
	if os.Geteuid() != 0 {
		return 0, 0, false, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, 0, false, fmt.Errorf("pgcluster: running as root needs OS user %q to run PostgreSQL: %w", name, err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid, true, nil
}

// OSUserIDs exposes the uid/gid PostgreSQL runs as (ok=false when not root),
// for callers that create files a cluster must own.
func OSUserIDs(name string) (uid, gid int, ok bool, err error) {
	if name == "" {
		name = "postgres"
	}
	return osUserIDs(name)
}

// MkdirTemp creates a new temporary directory (os.MkdirTemp's pattern) that
// the PostgreSQL OS user may use: mode 0755 and, when the caller is root,
// owned by that user. Clusters can be made inside it. The caller removes it.
func MkdirTemp(pattern string) (string, error) { return MkdirTempIn("", pattern) }

// MkdirTempIn is MkdirTemp in dir ("" = the default temporary directory).
func MkdirTempIn(dir, pattern string) (string, error) {
	d, err := os.MkdirTemp(dir, pattern)
	if err != nil {
		return "", fmt.Errorf("pgcluster: temp dir: %w", err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		os.RemoveAll(d)
		return "", fmt.Errorf("pgcluster: temp dir: %w", err)
	}
	if uid, gid, ok, err := osUserIDs("postgres"); err != nil {
		os.RemoveAll(d)
		return "", err
	} else if ok {
		if err := os.Chown(d, uid, gid); err != nil {
			os.RemoveAll(d)
			return "", fmt.Errorf("pgcluster: temp dir: %w", err)
		}
	}
	return d, nil
}
