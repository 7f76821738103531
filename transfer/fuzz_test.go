package transfer

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// memSink records a received tree in memory (for the fuzzer). prepare runs
// on the preparer's goroutines, hence the lock.
type memSink struct {
	mu    sync.Mutex
	dirs  map[string]fs.FileMode
	files map[string]*bytes.Buffer
}

func newMemSink() *memSink {
	return &memSink{dirs: map[string]fs.FileMode{}, files: map[string]*bytes.Buffer{}}
}

type memFile struct{ *bytes.Buffer }

func (memFile) Close() error { return nil }

func (m *memSink) mkdir(p string, mode fs.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dirs[p] = mode
	return nil
}

func (m *memSink) create(p string, mode fs.FileMode) (fileSink, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.files[p]; ok {
		return nil, fmt.Errorf("%s exists", p)
	}
	b := new(bytes.Buffer)
	m.files[p] = b
	return memFile{b}, nil
}

func (m *memSink) prepare(p string, mode fs.FileMode) error {
	_, err := m.create(p, mode)
	return err
}

func (m *memSink) openPrepared(p string) (fileSink, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.files[p]
	if !ok {
		return nil, fmt.Errorf("%s was not prepared", p)
	}
	return memFile{b}, nil
}

func (m *memSink) discard(p string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.files[p]; !ok {
		return fmt.Errorf("%s was not prepared", p)
	}
	delete(m.files, p)
	return nil
}

func (m *memSink) document(p string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.files[p]; ok {
		return fmt.Errorf("%s exists", p)
	}
	m.files[p] = bytes.NewBuffer(data)
	return nil
}

func (m *memSink) finish() error { return nil }

// FuzzReceive feeds arbitrary bytes to the receiver's frame parser and state
// machine: it must never panic, never accept an unsafe path, and whatever it
// accepts must be self-consistent.
func FuzzReceive(f *testing.F) {
	root := f.TempDir()
	for p, data := range map[string][]byte{"a/b": []byte("hello"), "c": nil, "d": bytes.Repeat([]byte{7}, 3000)} {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := osMkdirWrite(full, data); err != nil {
			f.Fatal(err)
		}
	}
	entries, err := Walk(root, nil)
	if err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	_, err = Send(context.Background(), &buf, root, entries, SendOptions{ChunkSize: 1024, Finish: func(context.Context) ([]Document, error) {
		return []Document{{Name: "backup_label", Data: []byte("label")}}, nil
	}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(appendEnd(appendHeader(nil), totals{}))
	f.Add(appendAbort(appendHeader(nil), "boom"))
	f.Add(appendTrailer(appendFile(appendHeader(nil), "x", 0o600, 0), 0, 0))
	f.Fuzz(func(t *testing.T, stream []byte) {
		m := newMemSink()
		st, err := receive(context.Background(), bytes.NewReader(stream), m, nil, nil)
		for p := range m.files {
			if checkPath(p) != nil {
				t.Fatalf("unsafe file path %q created", p)
			}
		}
		for p := range m.dirs {
			if checkPath(p) != nil {
				t.Fatalf("unsafe dir path %q created", p)
			}
		}
		if err != nil {
			return
		}
		var total int64
		for _, d := range st.Documents {
			if !bytes.Equal(m.files[d.Name].Bytes(), d.Data) {
				t.Fatalf("document %s differs from what was written", d.Name)
			}
		}
		for p, b := range m.files {
			total += int64(b.Len())
			_ = p
		}
		var docBytes int64
		for _, d := range st.Documents {
			docBytes += int64(len(d.Data))
		}
		if total-docBytes != st.Bytes {
			t.Fatalf("accepted stream: %d file bytes written, stats say %d", total-docBytes, st.Bytes)
		}
	})
}

func osMkdirWrite(full string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
		return err
	}
	return os.WriteFile(full, data, 0o600)
}
