package snapshot

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicedb/sluice/transfer"
)

// fakeStream is a snapshot stream of a minimal fake data directory.
func fakeStream(t *testing.T) []byte {
	t.Helper()
	root := t.TempDir()
	mkTree(t, root, "PG_VERSION", "global/pg_control", "base/1/1234", "pg_wal/000000010000000000000001")
	entries, err := List(root)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_, err = transfer.Send(context.Background(), &buf, root, entries, transfer.SendOptions{
		Finish: func(context.Context) ([]transfer.Document, error) {
			return []transfer.Document{{Name: "backup_label", Data: []byte("START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\n")}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestWriterReceivesCompleteStream(t *testing.T) {
	stream := fakeStream(t)
	dest := filepath.Join(t.TempDir(), "data")
	w := NewWriter(context.Background(), dest, ReceiveOptions{})
	for b := stream; len(b) > 0; { // in odd-sized pieces, as a transport would
		n := min(len(b), 1000)
		if _, err := w.Write(b[:n]); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Result().Files != 3 || w.Result().BackupLabel == "" {
		t.Fatalf("result %+v", w.Result())
	}
	if _, err := os.Stat(filepath.Join(dest, "pg_wal", "archive_status")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dest, "pg_wal", "000000010000000000000001")); err == nil {
		t.Fatal("WAL segment was copied")
	}
}

func TestWriterCloseReportsShortStream(t *testing.T) {
	stream := fakeStream(t)
	w := NewWriter(context.Background(), filepath.Join(t.TempDir(), "data"), ReceiveOptions{})
	if _, err := w.Write(stream[:len(stream)-10]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil {
		t.Fatal("Close accepted a stream cut short")
	}
}

func TestWriterWriteFailsAfterReceiverError(t *testing.T) {
	w := NewWriter(context.Background(), filepath.Join(t.TempDir(), "data"), ReceiveOptions{})
	w.Write([]byte("not a snapshot stream at all"))
	if _, err := w.Write(make([]byte, 1<<20)); err == nil {
		t.Fatal("Write succeeded after the receiver rejected the stream")
	}
	if err := w.Close(); err == nil {
		t.Fatal("Close returned nil for a bad stream")
	}
}
