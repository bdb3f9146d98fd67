//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestAgentRefusesNonRegularStateFile: an epoch file that is a FIFO (which
// would block the start) makes the agent exit 2 at once, with one line
// naming it.
func TestAgentRefusesNonRegularStateFile(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "d")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(data, "epoch")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := tenure(t, "agent", "--bind", "127.0.0.1:0", "--peer-bind", "127.0.0.1:0",
		"--socket", filepath.Join(dir, "s.sock"), "--data-dir", data)
	want := "level=ERROR msg=\"tenure agent: cannot start\" err=\"agent: state file " + fifo + " is a named pipe (FIFO), not a regular file"
	if code != 2 || !strings.Contains(stderr, want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
		t.Fatalf("exit %d, stderr %q; want exit 2 and one line saying %q", code, stderr, want)
	}
}
