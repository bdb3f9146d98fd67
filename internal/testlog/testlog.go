// Package testlog routes log/slog output to a test's log, so that a failing
// test shows what the code under test logged and a passing one stays quiet.
package testlog

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// New returns a debug-level text logger writing to t.Log; prefix (may be
// empty) starts every line. Lines logged after the test's cleanups have
// run are dropped: testing panics on a t.Log after the test completed, and
// goroutines outside our control log late (memberlist's probe of a node
// finishes its wait after Shutdown has returned).
func New(t testing.TB, prefix string) *slog.Logger {
	w := &writer{t: t, prefix: prefix}
	t.Cleanup(w.close) // runs after the cleanups registered later, which stop the code under test
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type writer struct {
	t      testing.TB
	prefix string

	mu   sync.Mutex
	done bool
}

func (w *writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(w.prefix + strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *writer) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
}

// Seed derives a seed from the test's name (FNV-1a), so a randomized test
// replays the same schedule every run, and a failure names its seed.
func Seed(t testing.TB) uint64 {
	var h uint64 = 14695981039346656037
	for _, c := range []byte(t.Name()) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

// Buffer is a bytes.Buffer safe for concurrent writers and readers, for
// capturing a process's or a logger's output in a test.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Field is the value of key in a line of slog's text format (key=value,
// unquoted values only), "" when the line has no such field: for tests
// that read an agent's log.
func Field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}
