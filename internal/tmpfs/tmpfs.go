// Package tmpfs mounts small tmpfs file systems and fills them, so that
// tests can give an agent a disk of its own and make it full. It needs
// root (CAP_SYS_ADMIN) and Linux.
package tmpfs

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Mount mounts a tmpfs of size (as mount(8) takes it: "512k", "32m") on
// dir, which must exist, readable by its owner only.
func Mount(dir, size string) error {
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		return fmt.Errorf("tmpfs: mount %s on %s: %w", size, dir, err)
	}
	return nil
}

// Unmount unmounts the file system on dir lazily: a process that still
// holds a file there keeps it until it closes it.
func Unmount(dir string) error {
	if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("tmpfs: unmount %s: %w", dir, err)
	}
	return nil
}

// Fill writes the file path until its file system has no space left
// (ENOSPC), which it does not report as an error. Removing path frees
// the space again.
func Fill(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("tmpfs: fill: %w", err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err = f.Write(buf); err != nil {
			break
		}
	}
	cerr := f.Close()
	switch {
	case !errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("tmpfs: fill %s: %w", path, err)
	case cerr != nil && !errors.Is(cerr, syscall.ENOSPC):
		return fmt.Errorf("tmpfs: fill %s: %w", path, cerr)
	}
	return nil
}
