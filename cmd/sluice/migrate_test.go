package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicedb/sluice/agent/client"
)

// TestMigrateResult: a committed live migration's line and JSON say how
// its snapshot's checkpoint was taken; stop-and-copy's say nothing of it.
func TestMigrateResult(t *testing.T) {
	live := client.Migration{ID: "m1", Tenant: 3, Peer: "db2", Mode: "live", Done: true, Outcome: "committed",
		Summary: &client.Summary{Outcome: "committed", Bytes: 50e6, Seconds: 7.5, FreezeMS: 31, Checkpoint: "paced 3s", CheckpointSeconds: 2.84, WALRelay: "target", WALBytes: 12e6}}
	var b bytes.Buffer
	if err := printMigrate(&b, false, result(live, "db1")); err != nil {
		t.Fatal(err)
	}
	if want := "freeze 31 ms; checkpoint paced 3s, 2.8 s; WAL relayed by the target, 12.0 MB\n"; !strings.HasSuffix(b.String(), want) {
		t.Errorf("line %q, want it to end %q", b.String(), want)
	}
	b.Reset()
	if err := printMigrate(&b, true, result(live, "db1")); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got["checkpoint"] != "paced 3s" || got["checkpoint_seconds"] != 2.84 || got["wal_relay"] != "target" || got["wal_relayed_bytes"] != 12e6 {
		t.Errorf("--json %s: want checkpoint, checkpoint_seconds, wal_relay and wal_relayed_bytes", b.String())
	}
	cold := live
	cold.Mode = "stop-and-copy"
	cold.Summary = &client.Summary{Outcome: "committed", Bytes: 50e6, Seconds: 3, FreezeMS: 900, DowntimeMS: 900}
	b.Reset()
	if err := printMigrate(&b, false, result(cold, "db1")); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "checkpoint") || strings.Contains(b.String(), "WAL") || !strings.HasSuffix(b.String(), "downtime 900 ms\n") {
		t.Errorf("stop-and-copy line %q", b.String())
	}
}

// TestProgressLineCheckpoint: while the source checkpoints the line says
// so instead of bytes and ETA, the loop's latency still shown.
func TestProgressLineCheckpoint(t *testing.T) {
	m := client.Migration{Progress: client.Progress{Phase: "snapshot", Action: "checkpoint paced 3s", TotalBytes: 50e6, ETASeconds: -1, LagBytes: -1, Controller: "pid", LatencyMs: 2.5, SetpointMs: 4}}
	l := progressLine(m)
	if !strings.Contains(l, "waiting for the source's checkpoint (paced 3s)") || !strings.Contains(l, "latency 2.5 ms") || strings.Contains(l, "ETA") {
		t.Errorf("line %q", l)
	}
	m.Progress.Action = "stream-snapshot slot=s1"
	if l := progressLine(m); strings.Contains(l, "checkpoint") || !strings.Contains(l, "0 B / 50.0 MB") || !strings.Contains(l, "ETA -") {
		t.Errorf("line %q", l)
	}
}

// TestProgressLineWarning: a catch-up that will not end in time says so on
// the progress line, after the figures; with an ETA when it drains.
func TestProgressLineWarning(t *testing.T) {
	m := client.Migration{Progress: client.Progress{Phase: "catch-up", Bytes: 3e9, Rate: 4e6, ETASeconds: -1, LagBytes: 2.85e9,
		Warning: "catch-up is not converging: replay lag 2.85 GB"}}
	if l := progressLine(m); !strings.Contains(l, "lag 2.85 GB  warning: catch-up is not converging") || !strings.Contains(l, "ETA -") {
		t.Errorf("line %q", l)
	}
	m.Progress.Warning, m.Progress.ETASeconds = "", 42
	if l := progressLine(m); strings.Contains(l, "warning") || !strings.Contains(l, "ETA 42s") {
		t.Errorf("line %q", l)
	}
}
