package txlog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDecisionsSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	id := l.ID()
	for _, g := range []string{"g1", "g2", "g3"} {
		if err := l.Commit(Decision{GID: g, User: "app", Parts: []string{"ks/p1", "ks/p2"}}); err != nil {
			t.Fatal(err)
		}
	}
	l.Done("g2")
	l.Close()
	// A crash mid-append leaves a torn last line: ignored.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("c g4 app")
	f.Close()

	l, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.ID() != id {
		t.Errorf("id %q after reopen, want %q", l.ID(), id)
	}
	var gids []string
	for _, d := range l.Pending() {
		gids = append(gids, d.GID)
	}
	if strings.Join(gids, ",") != "g1,g3" {
		t.Errorf("pending %v, want g1,g3", gids)
	}
	if d, ok := l.Decided("g3"); !ok || d.User != "app" || len(d.Parts) != 2 {
		t.Errorf("Decided(g3) = %+v, %v", d, ok)
	}
	b, _ := os.ReadFile(path)
	if strings.Count(string(b), "\n") != 3 {
		t.Errorf("not compacted:\n%s", b)
	}
}

func TestDamagedLogRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	os.WriteFile(path, []byte("id x\nbogus line\nc g1 app ks/p1\n"), 0o600)
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), "malformed line") {
		t.Errorf("Open of a damaged log: %v", err)
	}
}
