// Package txlog is the keyspace router's two-phase commit decision log: a
// coordinator writes "commit" for a distributed transaction to disk
// (fsync) before it sends the first COMMIT PREPARED, and "done" when every
// participant has committed. After a crash the log says, for each
// transaction still prepared on some partition, whether it was decided:
// a decided one is committed, any other rolled back (presumed abort).
//
// The file is a text log of lines:
//
//	id <coordinator id>                  first line: names this coordinator's transactions
//	c <gid> <user> <partition>[,<partition>…]   decided to commit (fsynced)
//	d <gid>                              every participant committed
//
// Open compacts it: only the id and decisions not done are kept.
package txlog

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Decision is a transaction decided to commit and not yet done.
type Decision struct {
	GID   string
	User  string
	Parts []string
}

// Log is an open decision log; safe for concurrent use.
type Log struct {
	path string
	id   string
	mu   struct {
		sync.Mutex
		f       *os.File
		pending map[string]Decision
	}
}

// Open opens (creating if missing) the log at path and compacts it.
func Open(path string) (*Log, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("txlog: %w", err)
	}
	l := &Log{path: path}
	l.mu.pending = map[string]Decision{}
	if err := l.read(); err != nil {
		return nil, err
	}
	if l.id == "" {
		var b [6]byte
		rand.Read(b[:])
		l.id = hex.EncodeToString(b[:])
	}
	if err := l.rewrite(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("txlog: %w", err)
	}
	l.mu.f = f
	return l, nil
}

func (l *Log) read() error {
	f, err := os.Open(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("txlog: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	bad, badLine := "", 0
	for n := 1; sc.Scan(); n++ {
		if bad != "" {
			return fmt.Errorf("txlog: %s:%d: malformed line %q", l.path, badLine, bad)
		}
		fs := strings.Fields(sc.Text())
		switch {
		case len(fs) == 0:
		case fs[0] == "id" && len(fs) == 2:
			l.id = fs[1]
		case fs[0] == "c" && len(fs) == 4:
			l.mu.pending[fs[1]] = Decision{GID: fs[1], User: fs[2], Parts: strings.Split(fs[3], ",")}
		case fs[0] == "d" && len(fs) == 2:
			delete(l.mu.pending, fs[1])
		default:
			// A torn last line (a crash mid-append) was never fsynced: its
			// decision was not made. One followed by more is damage.
			bad, badLine = sc.Text(), n
		}
	}
	return sc.Err()
}

// rewrite replaces the file with the id and the pending decisions.
func (l *Log) rewrite() error {
	tmp := l.path + ".tmp"
	var b strings.Builder
	fmt.Fprintf(&b, "id %s\n", l.id)
	for _, d := range l.Pending() {
		fmt.Fprintf(&b, "c %s %s %s\n", d.GID, d.User, strings.Join(d.Parts, ","))
	}
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("txlog: %w", err)
	}
	if f, err := os.Open(tmp); err == nil {
		f.Sync()
		f.Close()
	}
	if err := os.Rename(tmp, l.path); err != nil {
		return fmt.Errorf("txlog: %w", err)
	}
	return nil
}

// ID names this coordinator; its transactions' gids carry it.
func (l *Log) ID() string { return l.id }

// Commit durably records the decision to commit gid (fsync).
func (l *Log) Commit(d Decision) error {
	line := fmt.Sprintf("c %s %s %s\n", d.GID, d.User, strings.Join(d.Parts, ","))
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.mu.f.WriteString(line); err != nil {
		return fmt.Errorf("txlog: %w", err)
	}
	if err := l.mu.f.Sync(); err != nil {
		return fmt.Errorf("txlog: %w", err)
	}
	l.mu.pending[d.GID] = d
	return nil
}

// Done records that every participant of gid committed (not synced: a
// lost "done" only makes recovery find nothing to do).
func (l *Log) Done(gid string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.mu.pending, gid)
	_, err := l.mu.f.WriteString("d " + gid + "\n")
	return err
}

// Decided reports whether gid was decided to commit and is not done.
func (l *Log) Decided(gid string) (Decision, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.mu.pending[gid]
	return d, ok
}

// Pending returns the decisions not done, by gid.
func (l *Log) Pending() []Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Decision, 0, len(l.mu.pending))
	for _, d := range l.mu.pending {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GID < out[j].GID })
	return out
}

// Close closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.f.Close()
}
