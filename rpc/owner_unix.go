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
