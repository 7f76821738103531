package migration

import "context"

// WarmBatchBlocks is how many blocks one Target.Prewarm call loads (128 = 1 MiB).
const WarmBatchBlocks = 128

// blockSize is PostgreSQL's default page size (bytes).
const blockSize = 8192

// warm readies the handover (prepareHandover, fenceEarly) and loads the
// source's buffer-cache block list into the target, WarmBatchBlocks at a
// time, paced by Env.Limiter as the snapshot is.
func (r *runner) warm(ctx context.Context, rec Record, a Warm) Event {
	if !r.prepared {
		if err := r.prepareHandover(ctx, rec); err != nil {
			return failed(a, err)
		}
	}
	if err := r.fenceEarly(ctx, rec); err != nil {
		return failed(a, err)
	}
	r.lag = -1 // not measured while warming; WaitCatchUp measures it again after
	blocks, err := r.env.Source.BufferBlocks(ctx)
	if err != nil {
		return failed(a, err)
	}
	r.copyStart, r.copyTotal = r.env.Now(), int64(len(blocks))*blockSize
	var done int64
	for i := 0; i < len(blocks); i += WarmBatchBlocks {
		batch := blocks[i:min(i+WarmBatchBlocks, len(blocks))]
		n := len(batch) * blockSize
		if r.env.Limiter != nil {
			for left := n; left > 0; left -= ChunkBytes {
				if err := r.env.Limiter.WaitN(ctx, min(left, ChunkBytes)); err != nil {
					return failed(a, err)
				}
			}
		}
		if err := r.env.Target.Prewarm(ctx, rec, batch); err != nil {
			return failed(a, err)
		}
		done += int64(n)
		r.progressBytes(rec, a.String(), done, false)
	}
	return Warmed{Blocks: len(blocks), Bytes: done}
}
