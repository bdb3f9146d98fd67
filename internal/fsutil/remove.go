package fsutil

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// RemoveFile removes path durably: it unlinks it and fsyncs the directory,
// so that after a crash the file stays gone. A missing file is not an
// error.
func RemoveFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err // "remove PATH: why", from the os package
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}
