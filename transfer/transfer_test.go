package transfer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// gate is a test Limiter that is either open (unlimited) or closed (paused),
// like a throttle.Limiter at rate +Inf or 0. hook, if set, runs on every WaitN.
type gate struct {
	mu    sync.Mutex
	open  chan struct{} // closed while the gate is open
	calls atomic.Int64
	hook  func(call int64)
}

var _ Limiter = (*gate)(nil)

func newGate(open bool) *gate {
	g := &gate{open: make(chan struct{})}
	if open {
		close(g.open)
	}
	return g
}

func (g *gate) setOpen(open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		if !open {
			g.open = make(chan struct{})
		}
	default:
		if open {
			close(g.open)
		}
	}
}

func (g *gate) WaitN(ctx context.Context, n int) error {
	c := g.calls.Add(1)
	if g.hook != nil {
		g.hook(c)
	}
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tcpPair returns two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			acc <- nil
			return
		}
		acc <- c
	}()
	client, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-acc
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func writeFile(t *testing.T, p string, data []byte, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func randBytes(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// oddTree builds a tree with empty, large, sparse-ish and nested files.
func oddTree(t *testing.T) string {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "empty"), nil, 0o600)
	writeFile(t, filepath.Join(root, "big.bin"), randBytes(1, 5<<20+12345), 0o640)
	writeFile(t, filepath.Join(root, "a", "b", "c", "deep.txt"), []byte("deep\n"), 0o600)
	writeFile(t, filepath.Join(root, "a", "exactchunk"), randBytes(2, DefaultChunkSize), 0o600)
	if err := os.MkdirAll(filepath.Join(root, "emptydir", "inner"), 0o750); err != nil {
		t.Fatal(err)
	}
	// Sparse-ish: a hole of 3 MiB, then data.
	f, err := os.Create(filepath.Join(root, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("tail"), 3<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return root
}

// sameTree fails unless every entry of want exists in got with the same
// content and permission bits (and nothing else exists in got but extra).
func sameTree(t *testing.T, want, got string, extra ...string) {
	t.Helper()
	wantEntries, err := Walk(want, nil)
	if err != nil {
		t.Fatal(err)
	}
	gotEntries, err := Walk(got, nil)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]Entry{}
	for _, e := range gotEntries {
		byPath[e.Path] = e
	}
	for _, x := range extra {
		delete(byPath, x)
	}
	for _, w := range wantEntries {
		g, ok := byPath[w.Path]
		if !ok {
			t.Errorf("%s missing at destination", w.Path)
			continue
		}
		delete(byPath, w.Path)
		if g.Dir != w.Dir || g.Mode != w.Mode {
			t.Errorf("%s: got dir=%v mode=%v, want dir=%v mode=%v", w.Path, g.Dir, g.Mode, w.Dir, w.Mode)
		}
		if !w.Dir {
			a, _ := os.ReadFile(filepath.Join(want, w.Path))
			b, _ := os.ReadFile(filepath.Join(got, w.Path))
			if !bytes.Equal(a, b) {
				t.Errorf("%s: content differs (%d vs %d bytes)", w.Path, len(a), len(b))
			}
		}
	}
	for p := range byPath {
		t.Errorf("unexpected %s at destination", p)
	}
}

type result struct {
	send SendStats
	serr error
	recv ReceiveStats
	rerr error
}

// roundTrip sends root's listing over loopback TCP into a fresh dest.
func roundTrip(t *testing.T, ctx context.Context, root string, entries []Entry, so SendOptions, ro ReceiveOptions) (string, result) {
	t.Helper()
	dest, wait := startRoundTrip(t, ctx, root, entries, so, ro)
	return dest, wait()
}

// startRoundTrip sets up a loopback copy (in the test goroutine) and runs
// it in the background; wait returns both sides' results.
func startRoundTrip(t *testing.T, ctx context.Context, root string, entries []Entry, so SendOptions, ro ReceiveOptions) (string, func() result) {
	t.Helper()
	dest := filepath.Join(t.TempDir(), "dest")
	c, s := tcpPair(t)
	var res result
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		res.recv, res.rerr = Receive(ctx, s, dest, ro)
		s.Close()
	}()
	go func() {
		defer wg.Done()
		res.send, res.serr = Send(ctx, c, root, entries, so)
		c.Close()
	}()
	return dest, func() result { wg.Wait(); return res }
}

func TestRoundTripOddTree(t *testing.T) {
	root := oddTree(t)
	entries, err := Walk(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	prog := new(Progress)
	docs := []Document{{Name: "backup_label", Data: []byte("START WAL LOCATION: 0/2000028\n")}, {Name: "meta/empty-doc", Data: nil}}
	so := SendOptions{
		ReadAhead: 1 << 20, ChunkSize: 64 << 10, Progress: prog,
		Finish: func(context.Context) ([]Document, error) { return docs, nil },
	}
	dest, res := roundTrip(t, context.Background(), root, entries, so, ReceiveOptions{Fsync: true})
	if res.serr != nil || res.rerr != nil {
		t.Fatalf("send: %v, receive: %v", res.serr, res.rerr)
	}
	sameTree(t, root, dest, "backup_label", "meta", "meta/empty-doc")
	got, err := os.ReadFile(filepath.Join(dest, "backup_label"))
	if err != nil || !bytes.Equal(got, docs[0].Data) {
		t.Fatalf("backup_label = %q, %v; want %q", got, err, docs[0].Data)
	}
	var total int64
	var files int64
	for _, e := range entries {
		if !e.Dir {
			total += e.Size
			files++
		}
	}
	if res.send.Bytes != total || res.recv.Bytes != total || res.send.Files != files || res.recv.Files != files {
		t.Fatalf("stats: send %+v recv %+v; want %d files, %d bytes", res.send, res.recv, files, total)
	}
	if p := prog.Snapshot(); p.BytesRead != total || p.BytesSent != total || p.TotalBytes != total || p.Buffered != 0 {
		t.Fatalf("progress %+v, want %d bytes read and sent, none buffered", p, total)
	}
	if len(res.recv.Documents) != 2 || res.recv.Documents[0].Name != "backup_label" {
		t.Fatalf("documents: %+v", res.recv.Documents)
	}
	if res.send.BufferHighWater > 1<<20 {
		t.Fatalf("buffer high water %d exceeds read-ahead cap %d", res.send.BufferHighWater, 1<<20)
	}
}

// flipWriter flips the last byte of the first data chunk frame it writes.
type flipWriter struct {
	w       io.Writer
	flipped bool
}

func (f *flipWriter) Write(b []byte) (int, error) {
	if !f.flipped && len(b) > chunkHeaderLen && b[0] == frameChunk {
		f.flipped = true
		c := append([]byte(nil), b...)
		c[len(c)-1] ^= 0x01
		return f.w.Write(c)
	}
	return f.w.Write(b)
}

func TestChecksumMismatchNamesFile(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "a.txt"), nil, 0o600)
	writeFile(t, filepath.Join(root, "data", "victim.bin"), randBytes(3, 300000), 0o600)
	entries, err := Walk(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := Send(context.Background(), &flipWriter{w: &buf}, root, entries, SendOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = Receive(context.Background(), &buf, filepath.Join(t.TempDir(), "d"), ReceiveOptions{})
	if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "data/victim.bin") {
		t.Fatalf("Receive = %v, want checksum mismatch naming data/victim.bin", err)
	}
}

func TestUnsafePathsRejected(t *testing.T) {
	payload := []byte("x")
	for _, tc := range []struct {
		name   string
		stream []byte
	}{
		{"dotdot file", appendFile(appendHeader(nil), "../evil", 0o600, 1)},
		{"nested dotdot", appendFile(appendHeader(nil), "a/../../evil", 0o600, 1)},
		{"absolute", appendFile(appendHeader(nil), "/tmp/evil", 0o600, 1)},
		{"dotdot dir", appendDir(appendHeader(nil), "..", 0o700)},
		{"unclean", appendDir(appendHeader(nil), "a//b", 0o700)},
		{"empty", appendDir(appendHeader(nil), "", 0o700)},
		{"document", appendDocument(appendHeader(nil), "../evil", payload)},
		{"listed", appendListed(appendHeader(nil), "../evil", 0o600)},
		{"listed absolute", appendListed(appendHeader(nil), "/tmp/evil", 0o600)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dest := filepath.Join(base, "dest", "inner")
			s := append(tc.stream, frameChunk, 0, 0, 0, 1, 'x')
			_, err := Receive(context.Background(), bytes.NewReader(s), dest, ReceiveOptions{})
			if !errors.Is(err, ErrUnsafePath) {
				t.Fatalf("Receive = %v, want ErrUnsafePath", err)
			}
			for _, p := range []string{filepath.Join(base, "evil"), filepath.Join(base, "dest", "evil"), "/tmp/evil"} {
				if _, err := os.Stat(p); err == nil {
					t.Fatalf("%s was created", p)
				}
			}
		})
	}
}

func TestVanishedFileSkipped(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "keep"), []byte("keep"), 0o600)
	writeFile(t, filepath.Join(root, "gone"), []byte("gone"), 0o600)
	entries, err := Walk(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(root, "gone"))
	dest, res := roundTrip(t, context.Background(), root, entries, SendOptions{}, ReceiveOptions{})
	if res.serr != nil || res.rerr != nil {
		t.Fatalf("send: %v, receive: %v", res.serr, res.rerr)
	}
	if len(res.send.Skipped) != 1 || res.send.Skipped[0] != "gone" || len(res.recv.Skipped) != 1 {
		t.Fatalf("skipped: send %v, receive %v; want [gone]", res.send.Skipped, res.recv.Skipped)
	}
	if _, err := os.Stat(filepath.Join(dest, "gone")); err == nil {
		t.Fatal("vanished file exists at destination")
	}
	sameTree(t, root, dest)
}

// TestFileChangesWhileRead shrinks or grows a file after its first chunk was
// read: a shrunk file is sent as read, a grown one up to its size at open.
func TestFileChangesWhileRead(t *testing.T) {
	const chunk = 64 << 10
	for _, tc := range []struct {
		name   string
		change func(f string) error
		want   int
	}{
		{"shrinks", func(f string) error { return os.Truncate(f, 100000) }, 100000},
		{"grows", func(f string) error {
			h, err := os.OpenFile(f, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer h.Close()
			_, err = h.Write(make([]byte, 1<<20))
			return err
		}, 4 * chunk},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			p := filepath.Join(root, "f")
			orig := randBytes(4, 4*chunk)
			writeFile(t, p, orig, 0o600)
			entries, err := Walk(root, nil)
			if err != nil {
				t.Fatal(err)
			}
			g := newGate(true)
			var changeErr error
			g.hook = func(call int64) {
				if call == 2 { // after the first chunk was read
					changeErr = tc.change(p)
				}
			}
			dest, res := roundTrip(t, context.Background(), root, entries, SendOptions{ChunkSize: chunk, Prefetch: g}, ReceiveOptions{})
			if changeErr != nil || res.serr != nil || res.rerr != nil {
				t.Fatalf("change: %v, send: %v, receive: %v", changeErr, res.serr, res.rerr)
			}
			got, _ := os.ReadFile(filepath.Join(dest, "f"))
			if len(got) != tc.want || !bytes.Equal(got, orig[:tc.want]) {
				t.Fatalf("received %d bytes, want the first %d of the original", len(got), tc.want)
			}
		})
	}
}

func TestReceiveRejectsNonEmptyDest(t *testing.T) {
	dest := t.TempDir()
	writeFile(t, filepath.Join(dest, "old"), []byte("x"), 0o600)
	_, err := Receive(context.Background(), bytes.NewReader(appendEnd(appendHeader(nil), totals{})), dest, ReceiveOptions{})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Receive = %v, want destination not empty", err)
	}
}

func TestDuplicatePathRejected(t *testing.T) {
	s := appendHeader(nil)
	s = appendFile(s, "x", 0o600, 0)
	s = appendTrailer(s, 0, 0)
	s = appendFile(s, "x", 0o600, 0)
	s = appendTrailer(s, 0, 0)
	_, err := Receive(context.Background(), bytes.NewReader(s), filepath.Join(t.TempDir(), "d"), ReceiveOptions{})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("Receive = %v, want duplicate rejected", err)
	}
}

// TestListedFiles covers the 'L' frames that announce files ahead of their
// data: what a receiver accepts, and what it rejects without writing
// anything outside the rules.
func TestListedFiles(t *testing.T) {
	v1 := func() []byte { // a version-1 header: no listing
		return binary.BigEndian.AppendUint32([]byte(magic), 1)
	}
	file := func(b []byte, p string, mode uint32, data string) []byte {
		b = appendFile(b, p, mode, uint64(len(data)))
		if data != "" {
			b = append(b, frameChunk)
			b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
			b = append(b, data...)
		}
		return appendTrailer(b, uint64(len(data)), crc32.Checksum([]byte(data), castagnoli))
	}
	for _, tc := range []struct {
		name   string
		stream []byte
		err    string            // "" = accepted
		files  map[string]string // accepted: the files at the destination
	}{
		{"listed then sent", appendEnd(file(appendListed(appendHeader(nil), "a/x", 0o640), "a/x", 0o640, "hello"), totals{Files: 1, Bytes: 5}),
			"", map[string]string{"a/x": "hello"}},
		{"listed out of order", appendEnd(file(file(appendListed(appendListed(appendHeader(nil), "x", 0o600), "y", 0o600), "y", 0o600, "Y"), "x", 0o600, "X"), totals{Files: 2, Bytes: 2}),
			"", map[string]string{"x": "X", "y": "Y"}},
		{"listed then skipped", appendEnd(appendSkipped(appendListed(appendHeader(nil), "gone", 0o600), "gone"), totals{Skipped: 1}),
			"", map[string]string{}},
		{"version 1, unlisted", appendEnd(file(v1(), "x", 0o600, "old"), totals{Files: 1, Bytes: 3}),
			"", map[string]string{"x": "old"}},
		{"listed never sent", appendEnd(appendListed(appendHeader(nil), "lost", 0o600), totals{}),
			"lost was listed but never sent", nil},
		{"listed twice", appendListed(appendListed(appendHeader(nil), "x", 0o600), "x", 0o600),
			"appears twice", nil},
		{"listed after sent", appendListed(file(appendHeader(nil), "x", 0o600, "x"), "x", 0o600),
			"appears twice", nil},
		{"sent twice", file(file(appendListed(appendHeader(nil), "x", 0o600), "x", 0o600, "1"), "x", 0o600, "2"),
			"appears twice", nil},
		{"listed is a directory", appendDir(appendListed(appendHeader(nil), "x", 0o600), "x", 0o700),
			"appears twice", nil},
		{"listed is a document", appendDocument(appendListed(appendHeader(nil), "x", 0o600), "x", []byte("doc")),
			"appears twice", nil},
		{"mode differs", file(appendListed(appendHeader(nil), "x", 0o600), "x", 0o644, ""),
			"differs from its listing", nil},
		{"listed inside a file", appendListed(appendFile(appendHeader(nil), "x", 0o600, 0), "y", 0o600),
			"inside file x", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "d")
			st, err := Receive(context.Background(), bytes.NewReader(tc.stream), dest, ReceiveOptions{})
			if tc.err != "" {
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Receive = %v, want ErrCorrupt saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Receive = %v", err)
			}
			got := map[string]string{}
			es, werr := Walk(dest, nil)
			if werr != nil {
				t.Fatal(werr)
			}
			for _, e := range es {
				if !e.Dir {
					b, _ := os.ReadFile(filepath.Join(dest, e.Path))
					got[e.Path] = string(b)
				}
			}
			if !maps.Equal(got, tc.files) || st.Files != int64(len(tc.files)) {
				t.Fatalf("destination holds %v (%d files in stats), want %v", got, st.Files, tc.files)
			}
		})
	}
}

// TestOwnerAndModes: every created file and directory gets the owner asked
// for (when running as root) and the permission bits from the stream.
func TestOwnerAndModes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	root := oddTree(t)
	entries, err := Walk(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	owner := &Owner{UID: 65534, GID: 65534}
	dest, res := roundTrip(t, context.Background(), root, entries, SendOptions{}, ReceiveOptions{Owner: owner})
	if res.serr != nil || res.rerr != nil {
		t.Fatalf("send: %v, receive: %v", res.serr, res.rerr)
	}
	sameTree(t, root, dest)
	err = filepath.Walk(dest, func(p string, info fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		if int(st.Uid) != owner.UID || int(st.Gid) != owner.GID {
			t.Errorf("%s owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, owner.UID, owner.GID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(dest); err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("destination mode %v, %v; want 0700", info.Mode().Perm(), err)
	}
}

func TestAbortBeforeSend(t *testing.T) {
	var buf bytes.Buffer
	if err := Abort(&buf, errors.New("tablespaces are not supported")); err != nil {
		t.Fatal(err)
	}
	_, err := Receive(context.Background(), &buf, filepath.Join(t.TempDir(), "d"), ReceiveOptions{})
	if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "tablespaces are not supported") {
		t.Fatalf("Receive = %v, want ErrAborted with the reason", err)
	}
}

// TestFlushBehind: a received file hands its bytes to writeback every
// FlushBehind bytes as it is written, not all at the end.
func TestFlushBehind(t *testing.T) {
	fh, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	f := &diskFile{f: fh}
	chunk := make([]byte, 1<<20)
	for i := 0; i < 2*FlushBehind/len(chunk)+3; i++ {
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
		if f.off-f.flushed >= FlushBehind {
			t.Fatalf("after %d bytes only %d handed to writeback", f.off, f.flushed)
		}
	}
	if f.flushed != 2*FlushBehind {
		t.Fatalf("flushed %d of %d bytes, want %d", f.flushed, f.off, 2*FlushBehind)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
