package transfer

import (
	"context"
	"crypto/sha256"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// benchTree writes n files of size bytes each under a temp dir.
func benchTree(b *testing.B, n, size int) (string, []Entry) {
	b.Helper()
	root := b.TempDir()
	data := randBytes(9, size)
	for i := 0; i < n; i++ {
		p := filepath.Join(root, "base", "1", "f"+string(rune('a'+i%26))+string(rune('a'+i/26)))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	entries, err := Walk(root, nil)
	if err != nil {
		b.Fatal(err)
	}
	return root, entries
}

func benchPair(b *testing.B) (net.Conn, net.Conn) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ch := make(chan net.Conn, 1)
	go func() { c, _ := l.Accept(); ch <- c }()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	return c, <-ch
}

// BenchmarkSendReceive copies 16 files of 8 MiB over loopback TCP with Send
// and Receive (framing, read-ahead, CRC-32C on both sides).
func BenchmarkSendReceive(b *testing.B) {
	root, entries := benchTree(b, 16, 8<<20)
	b.SetBytes(16 * 8 << 20)
	for i := 0; i < b.N; i++ {
		dest := filepath.Join(b.TempDir(), "d")
		c, s := benchPair(b)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := Receive(context.Background(), s, dest, ReceiveOptions{}); err != nil {
				b.Error(err)
			}
			s.Close()
		}()
		if _, err := Send(context.Background(), c, root, entries, SendOptions{}); err != nil {
			b.Fatal(err)
		}
		c.Close()
		wg.Wait()
		os.RemoveAll(dest)
	}
}

// BenchmarkRawCopyBaseline is the floor to compare with: the same files
// copied over loopback TCP with io.Copy, one connection per file, no
// framing and no checksums.
func BenchmarkRawCopyBaseline(b *testing.B) {
	root, entries := benchTree(b, 16, 8<<20)
	b.SetBytes(16 * 8 << 20)
	for i := 0; i < b.N; i++ {
		dest := b.TempDir()
		for _, e := range entries {
			if e.Dir {
				os.MkdirAll(filepath.Join(dest, e.Path), 0o700)
				continue
			}
			c, s := benchPair(b)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				f, err := os.Create(filepath.Join(dest, e.Path))
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(f, s)
				f.Close()
				s.Close()
			}()
			f, err := os.Open(filepath.Join(root, e.Path))
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(c, f)
			f.Close()
			c.Close()
			wg.Wait()
		}
		os.RemoveAll(dest)
	}
}

// BenchmarkChecksum compares the per-file checksum candidates on one chunk:
// CRC-32C (Castagnoli, hardware accelerated; what the stream uses) and SHA-256.
func BenchmarkChecksum(b *testing.B) {
	data := randBytes(10, DefaultChunkSize)
	b.Run("crc32c", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		var c uint32
		for i := 0; i < b.N; i++ {
			c = crc32.Update(c, castagnoli, data)
		}
	})
	b.Run("sha256", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		h := sha256.New()
		for i := 0; i < b.N; i++ {
			h.Write(data)
		}
	})
}
