package fsutil

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteFileAtomicReplaces: the file holds the new content with the
// asked permissions, and no temporary file is left beside it.
func TestWriteFileAtomicReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "epoch")
	for _, content := range []string{"one", "two, longer"} {
		if err := WriteFileAtomic(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("stat: %v, %v", info, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Fatalf("the dir holds %v (%v), want the file alone", entries, err)
	}
}

// TestErrorsNameTheFileOnce: an error says which file it was about once,
// with the cause still there for errors.Is (the agent's log line is read
// by an operator with a full or broken disk).
func TestErrorsNameTheFileOnce(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone", "epoch")
	err := WriteFileAtomic(missing, []byte("x"), 0o600)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("write into a missing dir: %v", err)
	}
	if n := strings.Count(err.Error(), missing); n != 1 {
		t.Fatalf("%q names %s %d times, want once", err, missing, n)
	}
	if !strings.HasPrefix(err.Error(), "replace "+missing+": open ") {
		t.Fatalf("%q does not say what it replaced and which step failed", err)
	}

	full := filepath.Join(t.TempDir(), "drained")
	if err := os.MkdirAll(filepath.Join(full, "child"), 0o700); err != nil {
		t.Fatal(err)
	}
	err = RemoveFile(full) // a non-empty directory cannot be removed
	if err == nil || strings.Count(err.Error(), full) != 1 {
		t.Fatalf("remove a non-empty dir: %v; want an error naming it once", err)
	}
	if err := RemoveFile(filepath.Join(t.TempDir(), "never")); err != nil {
		t.Fatalf("remove a missing file: %v, want nil", err)
	}
}
