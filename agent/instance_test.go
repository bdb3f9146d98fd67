package agent

import (
	"log/slog"
	"os"
	"path/filepath"
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
