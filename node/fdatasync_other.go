//go:build !linux

package node

import "os"

// fdatasync flushes f to stable storage (fsync where fdatasync is not
// available).
func fdatasync(f *os.File) error { return f.Sync() }
