package pgreshard

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

// bytesSource is a Source of a stream held in memory.
func bytesSource(b []byte) Source {
	return func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
}

// frameOffsets returns where each frame of stream b starts, with its kind.
func frameOffsets(t *testing.T, b []byte) (offs []int, kinds []byte) {
	t.Helper()
	for o := len(streamMagic); o < len(b); {
		offs, kinds = append(offs, o), append(kinds, b[o])
		o += 5 + int(binary.BigEndian.Uint32(b[o+1:]))
	}
	return offs, kinds
}

// TestLoadStream: a chunk's stream written by CopyOut loads through Load
// exactly as Pull does; the same stream cut short anywhere, with a data
// byte changed, with a table's row count or the tables' count altered, or
// ending in the source's error frame fails and leaves the destination
// unchanged, its fence in place, and the connection usable.
func TestLoadStream(t *testing.T) {
	dsn := partitions(t)
	ctx := testCtx(t)
	ks := testKeyspace(t)
	src, dst := connect(t, ctx, dsn("p1")), connect(t, ctx, dsn("p2"))
	loadAccts(t, src, 0, 100, 3)
	chunk := acctChunk(3, intRange(ip(10), ip(60)))
	fencedPair(t, ctx, src, dst, chunk)

	var buf bytes.Buffer
	if err := CopyOut(ctx, src, chunk, ks, &buf); err != nil {
		t.Fatal(err)
	}
	full := buf.Bytes()
	offs, kinds := frameOffsets(t, full)
	if string(kinds) != "TDETDEZ" {
		t.Fatalf("frames %q, want TDETDEZ (two tables, one data frame each)", kinds)
	}
	dataOff := offs[1] + 5 + 40 // inside acct's rows
	edit := func(f func(b []byte) []byte) []byte { return f(slices.Clone(full)) }
	rewriteJSON := func(b []byte, at int, v any) []byte {
		p, _ := json.Marshal(v)
		n := int(binary.BigEndian.Uint32(b[at+1:]))
		frame := append([]byte{b[at], 0, 0, 0, 0}, p...)
		binary.BigEndian.PutUint32(frame[1:], uint32(len(p)))
		return append(append(slices.Clone(b[:at]), frame...), b[at+5+n:]...)
	}
	bad := []struct {
		name   string
		stream []byte
		want   string
	}{
		{"empty", nil, "cut short"},
		{"magic only", full[:len(streamMagic)], "cut short"},
		{"cut in a frame header", full[:offs[1]+2], "cut short"},
		{"cut in the root's rows", full[:dataOff], "cut short"},
		{"cut after the root", full[:offs[3]], "cut short"},
		{"cut in the last table's rows", full[:offs[4]+7], "cut short"},
		{"no end marker", full[:offs[6]], "cut short"},
		{"a data byte changed", edit(func(b []byte) []byte { b[len(b)-len(full)+dataOff] ^= 0x40; return b }), ""},
		{"a row fewer announced", rewriteJSON(full, offs[2], streamTableEnd{Rows: 49, Bytes: 0}), "rows"},
		{"a table more announced", rewriteJSON(full, offs[6], streamDone{Tables: 3}), "tables"},
		{"the source failed", append(slices.Clone(full[:offs[3]]), 'X', 0, 0, 0, 4, 'b', 'o', 'o', 'm'), "source: boom"},
		{"not a stream", []byte("HTTP/1.1 502 Bad Gateway\r\n\r\n"), "not a chunk stream"},
	}
	for _, tc := range bad {
		_, err := Load(ctx, dst, "r", chunk, ks, bytesSource(tc.stream))
		if err == nil {
			t.Fatalf("%s: Load succeeded", tc.name)
		}
		if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v; want an error naming %q", tc.name, err, tc.want)
		}
		if tc.want == "cut short" && !errors.Is(err, ErrTruncated) {
			t.Fatalf("%s: %v is not ErrTruncated", tc.name, err)
		}
		if a, l := count(t, dst, "SELECT count(*) FROM acct"), count(t, dst, "SELECT count(*) FROM acct_log"); a != 0 || l != 0 {
			t.Fatalf("%s: the failed load left %d acct and %d acct_log rows", tc.name, a, l)
		}
		if n := count(t, dst, "SELECT count(*) FROM sluice_fence WHERE side = 'in'"); n != 1 {
			t.Fatalf("%s: %d incoming fence rows after a failed load, want 1", tc.name, n)
		}
	}

	p, err := Load(ctx, dst, "r", chunk, ks, bytesSource(full))
	if err != nil || p.Already || p.Rows != 50+150 || p.Bytes <= 0 {
		t.Fatalf("Load of the whole stream: %+v, %v; want 200 rows", p, err)
	}
	want := rowsOf(t, src, "SELECT * FROM acct_log WHERE acct_id >= 10 AND acct_id < 60")
	if got := rowsOf(t, dst, "SELECT * FROM acct_log"); !slices.Equal(got, want) {
		t.Fatalf("acct_log at the destination: %v\nwant %v", got, want)
	}
	if p, err := Load(ctx, dst, "r", chunk, ks, bytesSource(nil)); err != nil || !p.Already {
		t.Fatalf("a second Load: %+v, %v; want Already without reading the source", p, err)
	}
}
