package tmpfs

import (
	"errors"
	"os"
	"path/filepath"
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
