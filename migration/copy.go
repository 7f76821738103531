package migration

import "context"

// hookBytes is how much of a snapshot is sent before the
// "during:stream-snapshot" hook point (4 MiB, or half the estimated total
// if that is less): well inside the copy of any tenant worth a test.
const hookBytes = 4 << 20

// streamSnapshot streams the source's hot snapshot into the target (live
// SNAPSHOT), paced by Env.Limiter; progress counts the bytes sent against
// the source's data size.
func (r *runner) streamSnapshot(ctx context.Context, rec Record, a StreamSnapshot) Event {
	src, tgt := r.env.Source, r.env.Target
	if si, err := src.Info(ctx); err == nil {
		r.copyTotal = si.DataBytes
	}
	r.copyStart = r.env.Now()
	w, err := tgt.OpenSnapshot(ctx, rec)
	if err != nil {
		return failed(a, err)
	}
	halfway := false
	info, err := src.SendSnapshot(ctx, w, r.env.Limiter, func(n int64) {
		r.progressBytes(rec, a.String(), n, false)
		if !halfway && n >= min(hookBytes, r.copyTotal/2) && n > 0 {
			halfway = true
			r.env.Hook(ctx, "during:"+ActionName(a))
		}
	})
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return failed(a, err)
	}
	return SnapshotDone{Bytes: info.Bytes, StartLSN: info.StartLSN, Checkpoint: info.Checkpoint, StartSeconds: info.StartSeconds}
}

// copyCold streams the stopped source's directory into the target
// (stop-and-copy), never paced: the clients are waiting.
func (r *runner) copyCold(ctx context.Context, rec Record, a CopyCold) Event {
	r.copyStart = r.env.Now()
	w, err := r.env.Target.OpenSnapshot(ctx, rec)
	if err != nil {
		return failed(a, err)
	}
	n, err := r.env.Source.SendCold(ctx, w, nil, func(n int64) { r.progressBytes(rec, a.String(), n, false) })
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return failed(a, err)
	}
	return Copied{Bytes: n}
}
