//go:build nemesis

package nemesis

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tenurehq/tenure/internal/netns"
	"github.com/tenurehq/tenure/internal/tmpfs"
)

// TestSweepRunsCleansUpKilledRuns: a run directory and a binaries
// directory of a test process that is gone, with a node's disk still
// mounted, are cleaned up (the disk unmounted, the run directory kept,
// the binaries removed); those of this live process are left alone.
func TestSweepRunsCleansUpKilledRuns(t *testing.T) {
	if err := netns.Available(); err != nil {
		t.Skip(err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	pid := gone.Process.Pid
	mk := func(pattern string) string {
		t.Helper()
		dir, err := os.MkdirTemp("", pattern)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	disk := func(run string) string {
		t.Helper()
		d := filepath.Join(run, "h1", "disk")
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := tmpfs.Mount(d, "64k"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if m, _ := tmpfs.Mounted(d); len(m) > 0 {
				if err := tmpfs.Unmount(d); err != nil {
					t.Error(err)
				}
			}
		})
		return d
	}
	deadRun := mk(fmt.Sprintf("%s%d-", RunDirPrefix, pid))
	deadBin := mk(fmt.Sprintf("%s%d-", BinDirPrefix, pid))
	liveRun := mk(RunDirPattern(RunDirPrefix))
	deadDisk, liveDisk := disk(deadRun), disk(liveRun)

	done, err := SweepRuns()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("swept: %q", done)
	if m, _ := tmpfs.Mounted(deadDisk); len(m) != 0 {
		t.Errorf("the killed run's disk is still mounted: %q", m)
	}
	if _, err := os.Stat(deadRun); err != nil {
		t.Errorf("the killed run's directory was not kept: %v", err)
	}
	if _, err := os.Stat(deadBin); !os.IsNotExist(err) {
		t.Errorf("the killed run's binaries were not removed: %v", err)
	}
	if m, _ := tmpfs.Mounted(liveDisk); len(m) != 1 {
		t.Errorf("this run's disk was unmounted: mounted %q", m)
	}
}
