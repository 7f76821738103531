package snapshot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicedb/sluice/transfer"
)

func mkTree(t *testing.T, root string, files ...string) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(root, filepath.FromSlash(f))
		if strings.HasSuffix(f, "/") {
			if err := os.MkdirAll(p, 0o700); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestListAppliesBasebackupExclusions(t *testing.T) {
	root := t.TempDir()
	mkTree(t, root,
		"PG_VERSION", "postgresql.conf", "postgresql.auto.conf", "postgresql.auto.conf.tmp",
		"postmaster.pid", "postmaster.opts", "backup_label", "backup_label.old", "tablespace_map",
		"backup_manifest", "current_logfiles.tmp", "standby.signal",
		"global/pg_control", "global/1262", "global/pg_internal.init", "global/pg_filenode.map",
		"base/1/1234", "base/1/1234_fsm", "base/1/1234.1", "base/1/pg_internal.init.123",
		"base/1/5555", "base/1/5555_fsm", "base/1/5555.2", "base/1/5555_init",
		"base/1/t3_999", "base/1/t3_999_fsm", "base/1/pgsql_tmp/pgsql_tmp1.0", "base/pgsql_tmp/x",
		"pg_wal/000000010000000000000001", "pg_wal/archive_status/000000010000000000000001.done",
		"pg_stat_tmp/global.stat", "pg_replslot/s1/state", "pg_dynshmem/x", "pg_notify/0000",
		"pg_serial/0000", "pg_snapshots/x", "pg_subtrans/0000", "pg_xact/0000", "pg_multixact/offsets/0000",
		"log/postmaster.log", "pg_tblspc/", "pg_stat/pgstat.stat", ".s.PGSQL.5432.lock",
	)
	entries, err := List(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		p := e.Path
		if e.Dir {
			p += "/"
		}
		got = append(got, p)
	}
	want := []string{
		"PG_VERSION",
		"base/", "base/1/", "base/1/1234", "base/1/1234.1", "base/1/1234_fsm", "base/1/5555_init",
		"global/", "global/1262", "global/pg_filenode.map",
		"log/",
		"pg_dynshmem/",
		"pg_multixact/", "pg_multixact/offsets/", "pg_multixact/offsets/0000",
		"pg_notify/", "pg_replslot/", "pg_serial/", "pg_snapshots/",
		"pg_stat/", "pg_stat/pgstat.stat",
		"pg_stat_tmp/", "pg_subtrans/", "pg_tblspc/",
		"pg_wal/", "pg_wal/archive_status/",
		"pg_xact/", "pg_xact/0000",
		"postgresql.auto.conf", "postgresql.conf",
		"global/pg_control",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("List:\n%s\n\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestListRefusesTablespaces(t *testing.T) {
	root := t.TempDir()
	mkTree(t, root, "global/pg_control", "pg_tblspc/")
	if err := os.Symlink(t.TempDir(), filepath.Join(root, "pg_tblspc", "16400")); err != nil {
		t.Fatal(err)
	}
	if _, err := List(root); !errors.Is(err, ErrTablespaces) {
		t.Fatalf("List = %v, want ErrTablespaces", err)
	}
}

func TestListRefusesNonDataDir(t *testing.T) {
	root := t.TempDir()
	mkTree(t, root, "some/file")
	if _, err := List(root); err == nil || !strings.Contains(err.Error(), "not a PostgreSQL data directory") {
		t.Fatalf("List = %v, want not a data directory", err)
	}
}

func TestRelFileNames(t *testing.T) {
	for _, tc := range []struct {
		name         string
		relnum, fork string
		ok, temp     bool
	}{
		{"16384", "16384", "", true, false},
		{"16384_fsm", "16384", "fsm", true, false},
		{"16384_vm.3", "16384", "vm", true, false},
		{"16384.12", "16384", "", true, false},
		{"16384_init", "16384", "init", true, false},
		{"16384_foo", "", "", false, false},
		{"16384.x", "", "", false, false},
		{"PG_VERSION", "", "", false, false},
		{"t3_16384", "", "", false, true},
		{"t3_16384_fsm.1", "", "", false, true},
		{"t_16384", "", "", false, false},
	} {
		relnum, fork, ok := parseRelFile(tc.name)
		if ok != tc.ok || relnum != tc.relnum || fork != tc.fork {
			t.Errorf("parseRelFile(%q) = %q, %q, %v; want %q, %q, %v", tc.name, relnum, fork, ok, tc.relnum, tc.fork, tc.ok)
		}
		if got := isTempRel(tc.name); got != tc.temp {
			t.Errorf("isTempRel(%q) = %v, want %v", tc.name, got, tc.temp)
		}
	}
}

func TestSendOrder(t *testing.T) {
	e := func(p string, dir bool, size int64) transfer.Entry {
		return transfer.Entry{Path: p, Dir: dir, Size: size}
	}
	in := []transfer.Entry{
		e("PG_VERSION", false, 3), e("base", true, 0), e("base/1", true, 0), e("base/1/1", false, 8192),
		e("base/1/2", false, 900<<20), e("base/1/3", false, 8192), e("global", true, 0), e("global/1262", false, 16384),
		e("pg_wal", true, 0), e("global/pg_control", false, 8192),
	}
	var got []string
	for _, x := range sendOrder(in) {
		got = append(got, x.Path)
	}
	want := []string{
		"base", "base/1", "global", "pg_wal", // directories, as listed
		"base/1/2", "global/1262", "base/1/1", "base/1/3", "PG_VERSION", // largest first, ties as listed
		"global/pg_control", // last
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("sendOrder = %v, want %v", got, want)
	}
}
