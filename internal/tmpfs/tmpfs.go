// Package tmpfs mounts small tmpfs file systems and fills them, so that
// tests can give an agent a disk of its own and make it full. It needs
// root (CAP_SYS_ADMIN) and Linux.
package tmpfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// Mounted returns the mount points of the tmpfs file systems mounted on
// dir or below it, as /proc/self/mountinfo lists them, the deepest first
// (the order to unmount them in).
func Mounted(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("tmpfs: list mounts: %w", err)
	}
	return mountedIn(string(data), filepath.Clean(dir)), nil
}

// mountedIn is Mounted on the text of a mountinfo file: each line is
// "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE
// SUPEROPTIONS", with spaces and other special characters of the mount
// point written as octal escapes (\040).
func mountedIn(mountinfo, dir string) []string {
	var out []string
	for _, line := range strings.Split(mountinfo, "\n") {
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) || fields[sep+1] != "tmpfs" {
			continue
		}
		mp := unescape(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return out
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
