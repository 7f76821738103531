package transfer

import (
	"os"

	"golang.org/x/sys/unix"
)

// flushBehind starts the writeback of n bytes of f at off without waiting
// for it. Best effort: an error only means the pages are written later.
func flushBehind(f *os.File, off, n int64) {
	unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
