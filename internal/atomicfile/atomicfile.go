// Package atomicfile writes a file so that no reader, and no crash, ever
// sees it half written: the data goes to a temporary file beside it, is
// synced to disk, and is renamed into place.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data (mode 0644). The temporary file has a
// unique name, so two writers of one path never mix their bytes.
func Write(path string, data []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644) // CreateTemp makes it private
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	return err
}
