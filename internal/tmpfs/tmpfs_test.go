package tmpfs

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// TestFillMakesWritesFail: on a mounted tmpfs, Fill leaves no space, a
// write then fails with ENOSPC, and removing the filler frees it again.
func TestFillMakesWritesFail(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := Mount(dir, "256k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Unmount(dir); err != nil {
			t.Error(err)
		}
	})
	filler := filepath.Join(dir, "filler")
	if err := Fill(filler); err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(dir, "probe")
	if err := os.WriteFile(probe, make([]byte, 8192), 0o600); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write to a full tmpfs: %v, want ENOSPC", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(probe, make([]byte, 8192), 0o600); err != nil {
		t.Fatalf("a write after freeing it: %v", err)
	}
}

// TestMountedListsTmpfsBelowDir: Mounted finds the tmpfs mounted below a
// directory, deepest first, and none once unmounted.
func TestMountedListsTmpfsBelowDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	outer, inner := filepath.Join(dir, "a b"), filepath.Join(dir, "a b", "disk")
	if err := os.Mkdir(outer, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Mount(outer, "256k"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(inner, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Mount(inner, "256k"); err != nil {
		t.Fatal(err)
	}
	got, err := Mounted(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, mp := range got {
		if err := Unmount(mp); err != nil {
			t.Error(err)
		}
	}
	if want := []string{inner, outer}; !slices.Equal(got, want) {
		t.Fatalf("Mounted = %q, want %q", got, want)
	}
	if got, err := Mounted(dir); err != nil || len(got) != 0 {
		t.Fatalf("after unmounting: Mounted = %q, %v; want none", got, err)
	}
}

// TestMountedInParsesMountinfo: only tmpfs at or below the directory, not
// a sibling that shares its prefix, with escapes undone.
func TestMountedInParsesMountinfo(t *testing.T) {
	const info = `22 1 0:21 / /tmp rw,relatime shared:5 - tmpfs tmpfs rw
40 22 0:35 / /tmp/run-1 rw - tmpfs tmpfs rw,size=256k
41 40 0:36 / /tmp/run-1/h1\040x/disk rw - tmpfs tmpfs rw,size=256k
42 22 0:37 / /tmp/run-10/disk rw - tmpfs tmpfs rw,size=256k
43 40 8:1 / /tmp/run-1/ext rw - ext4 /dev/sda1 rw
`
	got := mountedIn(info, "/tmp/run-1")
	if want := []string{"/tmp/run-1/h1 x/disk", "/tmp/run-1"}; !slices.Equal(got, want) {
		t.Fatalf("mountedIn = %q, want %q", got, want)
	}
}
