//go:build !unix

package weights

import (
	"io"
	"os"
)

// mapFile reads the whole file where mmap is not available.
func mapFile(f *os.File) ([]byte, func() error, error) {
	b, err := io.ReadAll(f)
	return b, nil, err
}
