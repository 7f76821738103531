//go:build !linux

package transfer

import "os"

// flushBehind is a no-op where sync_file_range does not exist.
func flushBehind(f *os.File, off, n int64) {}
