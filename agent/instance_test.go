package agent

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstanceFileNamesThePreviousRun: each run draws a new, non-zero
// instance and names the one before it on the same data dir; a data dir
// without the file, or with one that does not read, names none.
func TestInstanceFileNamesThePreviousRun(t *testing.T) {
	dir := t.TempDir()
	run := func() *Agent {
		a := &Agent{cfg: Config{DataDir: dir}, log: slog.New(slog.DiscardHandler)}
		a.openInstance()
		return a
	}
	first := run()
	if first.instance == 0 || first.previous != 0 {
		t.Fatalf("first run: instance %d, previous %d; want a non-zero instance and none before", first.instance, first.previous)
	}
	second := run()
	if second.instance == 0 || second.instance == first.instance || second.previous != first.instance {
		t.Fatalf("second run: instance %d, previous %d; want a new instance after %d", second.instance, second.previous, first.instance)
	}
	if err := os.WriteFile(filepath.Join(dir, instanceFile), []byte("not a number\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if third := run(); third.previous != 0 {
		t.Fatalf("after a file that does not read: previous %d, want none", third.previous)
	}
	if fourth := run(); fourth.previous == 0 {
		t.Fatal("the file was not replaced after it did not read")
	}
}

// TestDataDirTakesOneAgent: a second agent started on a data dir that a
// running agent holds fails at once, naming the dir; once the first has
// stopped (or crashed: Halt), the second starts.
func TestDataDirTakesOneAgent(t *testing.T) {
	c := newTestCluster(t)
	first := c.start(c.config("n1", 1))
	cfg := c.config("n1", 1)
	cfg.SocketPath = filepath.Join(c.dir, "second.sock")
	if a, err := Start(cfg); err == nil {
		a.Halt()
		t.Fatal("a second agent started on a data dir in use")
	} else if !strings.Contains(err.Error(), "in use by another running agent") || !strings.Contains(err.Error(), cfg.DataDir) {
		t.Fatalf("the second agent says %q; want it to name the data dir in use", err)
	}
	first.Halt()
	second, err := Start(cfg)
	if err != nil {
		t.Fatalf("after the first agent stopped: %v", err)
	}
	second.Halt()
}
