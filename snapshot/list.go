package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/transfer"
)

// What a hot copy leaves out. The lists follow PostgreSQL 15's
// src/backend/replication/basebackup.c (excludeDirContents, excludeFiles,
// the pgsql_tmp prefix, unlogged and temporary relation files, pg_wal), with
// sluice's additions marked.
var (
	// excludeDirContents: these directories are sent empty wherever they
	// occur (their contents are recreated or reset at server start).
	excludeDirContents = map[string]bool{
		"pg_stat_tmp":  true, // temporary statistics (and extensions' scratch files)
		"pg_replslot":  true, // slots belong to the source
		"pg_dynshmem":  true,
		"pg_notify":    true,
		"pg_serial":    true,
		"pg_snapshots": true,
		"pg_subtrans":  true,
	}
	// excludeFiles: these names are skipped wherever they occur.
	excludeFiles = map[string]bool{
		"postgresql.auto.conf.tmp": true,
		"current_logfiles.tmp":     true,
		"backup_label":             true, // the stream's own backup_label comes from pg_backup_stop
		"tablespace_map":           true,
		"backup_manifest":          true,
		"postmaster.pid":           true,
		"postmaster.opts":          true,
		// sluice: a leftover label of an earlier restore, and the signal files
		// of a server that was once a standby: the target decides its own mode.
		"backup_label.old": true,
		"standby.signal":   true,
		"recovery.signal":  true,
		// sluice: settings given to this server for a while (a paced
		// checkpoint's), never the target's.
		pgcluster.TransientConf: true,
	}
	// excludePrefixes: names starting with these are skipped wherever they occur.
	excludePrefixes = []string{
		"pgsql_tmp",        // temporary files and directories (PG_TEMP_FILE_PREFIX)
		"pg_internal.init", // relation cache init files, rebuilt at start
		".s.PGSQL.",        // sluice: the socket lock file when the socket lives in the data directory
	}
	// topEmptyDirs: top-level directories sent empty.
	topEmptyDirs = map[string]bool{
		"pg_wal": true, // WAL comes from the replication slot, not the copy
		"log":    true, // sluice: pgcluster's server log; the target writes its own
	}
)

// pgControl is sent last, as pg_basebackup does.
const pgControl = "global/pg_control"

// ErrTablespaces is returned for a data directory with tablespaces outside
// it: their files would need a tablespace_map and a place on the target,
// which sluice does not arrange.
var ErrTablespaces = errors.New("snapshot: tablespaces are not supported")

// List returns the entries of a hot copy of the data directory dataDir, in
// the order they are sent: parents before children, global/pg_control last,
// and pg_wal/archive_status as an empty directory. It applies
// pg_basebackup's exclusions (see the variables above). It is what Send
// streams, and what `sluice bench snapshot` hands to tar for its baseline.
func List(dataDir string) ([]transfer.Entry, error) {
	tbl, err := os.ReadDir(filepath.Join(dataDir, "pg_tblspc"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("snapshot: list: %w", err)
	}
	if len(tbl) > 0 {
		return nil, fmt.Errorf("%w (pg_tblspc/%s)", ErrTablespaces, tbl[0].Name())
	}
	entries, err := transfer.Walk(dataDir, func(rel string, d fs.DirEntry) transfer.Decision {
		return decide(dataDir, rel, d)
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot: list: %w", err)
	}
	out := make([]transfer.Entry, 0, len(entries)+1)
	var control *transfer.Entry
	for i := range entries {
		e := entries[i]
		switch {
		case e.Path == pgControl:
			control = &entries[i]
			continue
		case e.Path == "pg_wal":
			out = append(out, e, transfer.Entry{Path: "pg_wal/archive_status", Dir: true, Mode: e.Mode})
			continue
		}
		out = append(out, e)
	}
	if control == nil {
		return nil, fmt.Errorf("snapshot: list: %s has no %s: not a PostgreSQL data directory", dataDir, pgControl)
	}
	return append(out, *control), nil
}

// decide is the exclusion filter for one entry of the data directory.
func decide(dataDir, rel string, d fs.DirEntry) transfer.Decision {
	name := d.Name()
	if d.Type()&(fs.ModeSocket|fs.ModeNamedPipe|fs.ModeDevice|fs.ModeCharDevice|fs.ModeIrregular) != 0 {
		return transfer.Exclude // pg_basebackup skips special files with a warning
	}
	for _, p := range excludePrefixes {
		if strings.HasPrefix(name, p) {
			return transfer.Exclude
		}
	}
	if excludeFiles[name] {
		return transfer.Exclude
	}
	parent := path.Dir(rel)
	if isDBDir(parent) {
		if isTempRel(name) {
			return transfer.Exclude
		}
		if relnum, fork, ok := parseRelFile(name); ok && fork != "init" {
			// An unlogged relation: only its init fork is copied; the main,
			// fsm and vm forks are reset from it at startup.
			if _, err := os.Lstat(filepath.Join(dataDir, filepath.FromSlash(parent), relnum+"_init")); err == nil {
				return transfer.Exclude
			}
		}
	}
	if d.IsDir() || d.Type()&fs.ModeSymlink != 0 {
		if excludeDirContents[name] || (parent == "." && topEmptyDirs[name]) {
			return transfer.IncludeEmpty
		}
	}
	return transfer.Include
}

// isDBDir reports whether rel is a database directory, base/<oid>.
// (Tablespaces are refused before listing.)
func isDBDir(rel string) bool {
	dir, oid := path.Split(rel)
	return dir == "base/" && allDigits(oid)
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseRelFile parses a relation file name <relnum>[_<fork>][.<segment>] and
// returns its relnum and fork ("" for main).
func parseRelFile(name string) (relnum, fork string, ok bool) {
	base, seg, hasSeg := strings.Cut(name, ".")
	if hasSeg && !allDigits(seg) {
		return "", "", false
	}
	relnum, fork, hasFork := strings.Cut(base, "_")
	if !allDigits(relnum) {
		return "", "", false
	}
	if hasFork && fork != "fsm" && fork != "vm" && fork != "init" {
		return "", "", false
	}
	return relnum, fork, true
}

// isTempRel reports whether name is a temporary relation's file,
// t<backend>_<relnum>[_<fork>][.<segment>].
func isTempRel(name string) bool {
	rest, ok := strings.CutPrefix(name, "t")
	if !ok {
		return false
	}
	backend, file, ok := strings.Cut(rest, "_")
	if !ok || !allDigits(backend) {
		return false
	}
	_, _, ok = parseRelFile(file)
	return ok
}
