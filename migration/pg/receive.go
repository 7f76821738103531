package pg

import (
	"context"
	"fmt"
	"io"

	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/snapshot"
)

// OpenSnapshot returns a writer that extracts the stream into m.TargetDir:
// a hot snapshot (package snapshot's stream, from Source.SendSnapshot) for a
// live migration, a cold directory stream (Source.SendCold) for
// stop-and-copy. Close waits for the extraction and returns its error.
func (t *LocalTarget) OpenSnapshot(ctx context.Context, m migration.Record) (io.WriteCloser, error) {
	if m.TargetDir == "" {
		return nil, fmt.Errorf("migration: open snapshot: migration %s has no reserved directory", m.ID)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		var err error
		if m.Mode == migration.StopAndCopy {
			_, err = receiveDir(pr, m.TargetDir, t.chown)
		} else {
			_, err = snapshot.Receive(ctx, pr, m.TargetDir, snapshot.ReceiveOptions{OSUser: t.Options.OSUser})
		}
		pr.CloseWithError(err)
		done <- err
	}()
	return &snapshotWriter{pw: pw, done: done}, nil
}

type snapshotWriter struct {
	pw   *io.PipeWriter
	done chan error
}

func (s *snapshotWriter) Write(b []byte) (int, error) { return s.pw.Write(b) }

func (s *snapshotWriter) Close() error {
	s.pw.Close()
	return <-s.done
}
