//go:build unix

package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDataDir takes an exclusive lock on dir's lock file, held by the
// returned file until it is closed (or the process ends): one agent at a
// time runs on a data dir. Two agents sharing one would share their
// epoch, their voter's record and their instance file (instance.go), so
// the second could take the first's term as its restart.
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("agent: data dir lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("agent: the data dir %s is in use by another running agent (%s is locked); give each agent a data dir of its own", dir, path)
		}
		return nil, fmt.Errorf("agent: lock the data dir: %w", err)
	}
	return f, nil
}
