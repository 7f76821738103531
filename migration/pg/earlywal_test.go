package pg

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/pgcluster"
)

// TestAdoptWAL: StartStandby's adoption of the early WAL moves complete and
// partial segments (the partial under its full name) into pg_wal, keeps a
// segment pg_wal already has, ignores other files, and removes the
// receiver's directory.
func TestAdoptWAL(t *testing.T) {
	root := t.TempDir()
	m := migration.Record{ID: "m1", TargetDir: filepath.Join(root, "7")}
	pgwal := filepath.Join(m.TargetDir, "pg_wal")
	if err := os.MkdirAll(pgwal, 0o700); err != nil {
		t.Fatal(err)
	}
	dir := WALDir(m)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"000000010000000000000003":         "three",
		"000000010000000000000004":         "four (received)",
		"000000010000000000000005.partial": "five",
		"pg_receivewal.log":                "log",
		"00000001000000000000000":          "short name",
	}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(pgwal, "000000010000000000000004"), []byte("four (snapshot)"), 0o600); err != nil {
		t.Fatal(err)
	}
	lt := NewLocalTarget(root, pgcluster.Options{})
	segs, n, err := lt.adoptWAL(m)
	if err != nil {
		t.Fatal(err)
	}
	if segs != 2 || n != int64(len("three")+len("five")) {
		t.Errorf("adopted %d segments, %d bytes; want 2, %d", segs, n, len("three")+len("five"))
	}
	es, _ := os.ReadDir(pgwal)
	var got []string
	for _, e := range es {
		b, _ := os.ReadFile(filepath.Join(pgwal, e.Name()))
		got = append(got, e.Name()+"="+string(b))
	}
	want := []string{"000000010000000000000003=three", "000000010000000000000004=four (snapshot)", "000000010000000000000005=five"}
	if !slices.Equal(got, want) {
		t.Errorf("pg_wal = %q, want %q", got, want)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the receiver's directory is left: %v", err)
	}
	// Nothing received: nothing to do.
	if segs, _, err := lt.adoptWAL(m); segs != 0 || err != nil {
		t.Errorf("second adoption: %d segments, %v", segs, err)
	}
}
