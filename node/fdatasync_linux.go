package node

import (
	"errors"
	"os"
	"syscall"
)

// fdatasync flushes f's data (and only the metadata needed to read it
// back, such as a size change) to stable storage.
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
