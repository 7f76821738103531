package transfer

import "sync/atomic"

// Progress is a live view of one transfer, updated by Send or Receive as they
// run and safe to read from any goroutine at any time (all fields are
// atomic). The zero value is ready; pass a pointer in the options and read it
// with Snapshot, e.g. once a second for a progress line (phase, bytes, rate, ETA).
//
// Send sets TotalBytes/TotalFiles from the listing (an estimate: files change
// while they are copied), Read* as the reader stage reads, Sent* as the sender
// writes, and Buffered/BufferHighWater for the read-ahead buffer. Receive sets
// Sent* for what it has written to disk.
type Progress struct {
	TotalBytes      atomic.Int64 // bytes of regular files in the listing
	TotalFiles      atomic.Int64 // regular files in the listing
	BytesRead       atomic.Int64 // file bytes read into the buffer
	FilesRead       atomic.Int64 // files fully read
	BytesSent       atomic.Int64 // file bytes written to the stream (Receive: to disk)
	FilesSent       atomic.Int64 // files whose trailer was written (Receive: verified)
	Buffered        atomic.Int64 // file bytes read but not yet sent
	BufferHighWater atomic.Int64 // largest Buffered seen, bytes
}

// ProgressSnapshot is a plain copy of Progress at one moment.
type ProgressSnapshot struct {
	TotalBytes      int64 `json:"total_bytes"`
	TotalFiles      int64 `json:"total_files"`
	BytesRead       int64 `json:"bytes_read"`
	FilesRead       int64 `json:"files_read"`
	BytesSent       int64 `json:"bytes_sent"`
	FilesSent       int64 `json:"files_sent"`
	Buffered        int64 `json:"buffered"`
	BufferHighWater int64 `json:"buffer_high_water"`
}

// Snapshot returns the current values. A nil Progress gives zeros.
func (p *Progress) Snapshot() ProgressSnapshot {
	if p == nil {
		return ProgressSnapshot{}
	}
	return ProgressSnapshot{
		TotalBytes:      p.TotalBytes.Load(),
		TotalFiles:      p.TotalFiles.Load(),
		BytesRead:       p.BytesRead.Load(),
		FilesRead:       p.FilesRead.Load(),
		BytesSent:       p.BytesSent.Load(),
		FilesSent:       p.FilesSent.Load(),
		Buffered:        p.Buffered.Load(),
		BufferHighWater: p.BufferHighWater.Load(),
	}
}

// addBuffered adds d to Buffered and raises BufferHighWater if needed.
func (p *Progress) addBuffered(d int64) {
	v := p.Buffered.Add(d)
	for {
		hw := p.BufferHighWater.Load()
		if v <= hw || p.BufferHighWater.CompareAndSwap(hw, v) {
			return
		}
	}
}
