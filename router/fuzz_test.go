package router

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"testing"
)

// FuzzSession feeds arbitrary client bytes to a session whose servers
// answer at once: whatever arrives, the router answers or ends the session
// with an error, never panics or hangs.
func FuzzSession(f *testing.F) {
	f.Add(frame('Q', []byte("SELECT 1\x00")))
	f.Add(append(frame('P', []byte("s\x00UPDATE usertable SET field0 = 'x' WHERE ycsb_key = $1\x00\x00\x00")), frame('S', nil)...))
	f.Add(append(frame('B', bindInt8("s", 5)), frame('S', nil)...))
	f.Add(frame('B', []byte{0, 0, 0, 9}))
	f.Add(frame('Q', []byte("BEGIN; UPDATE usertable SET field0 = 'x' WHERE ycsb_key = 1; COMMIT\x00")))
	f.Fuzz(func(t *testing.T, in []byte) {
		k := benchKeyspace(nil)
		s := New(Config{User: "app", Keyspace: func() *Keyspace { return k }, Backends: fakeBackends{}},
			bufio.NewReader(bytes.NewReader(in)), bufio.NewWriter(io.Discard))
		if _, err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		s.Serve(context.Background())
	})
}
