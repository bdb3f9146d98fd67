//go:build unix

package rpc

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// checkOwner refuses a socket directory owned by another user (root's
// directories are fine): that user could replace the socket with their own.
func checkOwner(dir string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if euid := os.Geteuid(); int(st.Uid) != euid && st.Uid != 0 {
		return fmt.Errorf("rpc: socket directory %s belongs to uid %d, not to this user (uid %d); refusing to serve there",
			dir, st.Uid, euid)
	}
	return nil
}

// shareDir lets group traverse the socket's directory (mode 0750 and that
// group), when a group is given and this process owns the directory.
func shareDir(dir string, group *int) error {
	if group == nil {
		return nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("rpc: inspect socket directory: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		return nil // not ours to change; the operator set it up
	}
	if err := os.Chown(dir, -1, *group); err != nil {
		return fmt.Errorf("rpc: give socket directory %s to group %d: %w", dir, *group, err)
	}
	if err := os.Chmod(dir, 0o750); err != nil {
		return fmt.Errorf("rpc: set mode of socket directory %s: %w", dir, err)
	}
	return nil
}
