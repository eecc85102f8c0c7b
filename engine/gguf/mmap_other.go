//go:build !unix

package gguf

import (
	"io"
	"os"
)

// mmap reads the file into memory where memory maps are not available.
func mmap(fd *os.File, size int) ([]byte, func() error, error) {
	b := make([]byte, size)
	if _, err := io.ReadFull(fd, b); err != nil {
		return nil, nil, err
	}
	return b, func() error { return nil }, nil
}
