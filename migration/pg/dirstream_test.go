package pg

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDirStreamChecksums: a cold stream round-trips a directory; a byte
// flipped in a file's body on the way, a complete stream without a checksum
// list, and a list naming a file that never came (or missing one that did)
// are refused.
func TestDirStreamChecksums(t *testing.T) {
	src := t.TempDir()
	files := map[string]string{
		"PG_VERSION":          "15\n",
		"base/1/1259":         strings.Repeat("relation page ", 1000),
		"pg_wal/000000010000": strings.Repeat("w", 4096),
	}
	for name, body := range files {
		p := filepath.Join(src, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var stream bytes.Buffer
	if err := sendDir(context.Background(), src, &stream, coldEmptyDirs, nil); err != nil {
		t.Fatal(err)
	}
	receive := func(b []byte) error {
		_, err := receiveDir(bytes.NewReader(b), t.TempDir(), nil)
		return err
	}

	dest := t.TempDir()
	if _, err := receiveDir(bytes.NewReader(stream.Bytes()), dest, nil); err != nil {
		t.Fatalf("intact stream: %v", err)
	}
	for name, body := range files {
		got, err := os.ReadFile(filepath.Join(dest, filepath.FromSlash(name)))
		if err != nil || string(got) != body {
			t.Fatalf("%s: %d bytes (%v), want the %d sent", name, len(got), err, len(body))
		}
	}
	if _, err := os.Stat(filepath.Join(dest, checksumEntry)); err == nil {
		t.Fatal("the checksum list was written into the data directory")
	}

	corrupt := bytes.Clone(stream.Bytes())
	i := bytes.Index(corrupt, []byte("relation page"))
	corrupt[i+3] ^= 0x20
	if err := receive(corrupt); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("flipped byte: %v, want a checksum error", err)
	}

	// A complete stream (end marker and count right) without the list.
	var bare bytes.Buffer
	tw := tar.NewWriter(&bare)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "PG_VERSION", Mode: 0o600, Size: 3})
	io.WriteString(tw, "15\n")
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: endMarker, Mode: 0o600, Size: 1})
	io.WriteString(tw, "1")
	tw.Close()
	if err := receive(bare.Bytes()); err == nil || !strings.Contains(err.Error(), "without its checksum list") {
		t.Fatalf("stream without a checksum list: %v, want refused", err)
	}

	if err := verifySums(strings.NewReader("00000000 base/1/1259\n"), map[string]uint32{}); err == nil || !strings.Contains(err.Error(), "not received") {
		t.Fatalf("listed but missing file: %v", err)
	}
	if err := verifySums(strings.NewReader(""), map[string]uint32{"x": 1}); err == nil {
		t.Fatal("received file missing from the list: no error")
	}
}
