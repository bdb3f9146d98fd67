//go:build nemesis

package nemesis

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tenurehq/tenure/internal/netns"
	"github.com/tenurehq/tenure/internal/tmpfs"
)

// Run directories and the directory of the built binaries are made in the
// system's temporary directory with these prefixes, followed by the PID of
// the test process that made them and a dash: RunDirPattern(RunDirPrefix)
// is the os.MkdirTemp pattern. A run that was killed (its test process is
// gone) leaves them behind, with the nodes' disks still mounted: SweepRuns
// cleans them up.
const (
	RunDirPrefix = "nemesis-"
	BinDirPrefix = "nemesis-bin-"
)

// RunDirPattern is the os.MkdirTemp pattern for a directory with prefix
// made by this process.
func RunDirPattern(prefix string) string { return fmt.Sprintf("%s%d-", prefix, os.Getpid()) }

// SweepRuns cleans up after harness processes that were killed: it
// unmounts the tmpfs disks left mounted in their run directories (which it
// keeps, with the nodes' logs, for reading) and removes their directories
// of built binaries. The agents such a run started are killed with its
// namespaces (netns.Sweep). It returns what it did, one line each.
func SweepRuns() ([]string, error) {
	tmp := os.TempDir()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return nil, fmt.Errorf("nemesis: sweep %s: %w", tmp, err)
	}
	var done []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, RunDirPrefix) {
			continue
		}
		bin := strings.HasPrefix(name, BinDirPrefix)
		prefix := RunDirPrefix
		if bin {
			prefix = BinDirPrefix
		}
		pid, ok := ownerPID(name, prefix)
		if !ok || pid == os.Getpid() || netns.Alive(pid) {
			continue // a directory of a live run, or named before PIDs were
		}
		dir := filepath.Join(tmp, name)
		if bin {
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, err)
				continue
			}
			done = append(done, "removed "+dir)
			continue
		}
		mounts, err := tmpfs.Mounted(dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, mp := range mounts {
			if err := tmpfs.Unmount(mp); err != nil {
				errs = append(errs, err)
				continue
			}
			done = append(done, "unmounted "+mp)
		}
	}
	return done, errors.Join(errs...)
}

// ownerPID reads the PID in a directory name made with RunDirPattern.
func ownerPID(name, prefix string) (int, bool) {
	rest := strings.TrimPrefix(name, prefix)
	digits, _, found := strings.Cut(rest, "-")
	if !found {
		return 0, false
	}
	pid, err := strconv.Atoi(digits)
	return pid, err == nil && pid > 0
}
