//go:build !unix

package rpc

import (
	"errors"
	"io/fs"
)

// checkOwner has no ownership to check on this platform.
func checkOwner(string, fs.FileInfo) error { return nil }

// shareDir is not supported here: socket groups need Unix ownership.
func shareDir(dir string, group *int) error {
	if group != nil {
		return errors.New("rpc: a socket group needs a Unix system")
	}
	return nil
}
