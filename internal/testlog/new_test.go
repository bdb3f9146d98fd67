package testlog

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what is logged and the cleanups,
// so a test can run them before the logger is used again.
type recorder struct {
	testing.TB
	lines    []string
	cleanups []func()
}

func (r *recorder) Log(args ...any)  { r.lines = append(r.lines, fmt.Sprint(args...)) }
func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

func TestNewDropsLinesAfterCleanup(t *testing.T) {
	r := &recorder{TB: t}
	log := New(r, "n1: ")
	log.Info("before")
	if len(r.lines) != 1 || !strings.HasPrefix(r.lines[0], "n1: ") || !strings.Contains(r.lines[0], "msg=before") {
		t.Fatalf("lines = %q, want one n1: line with msg=before", r.lines)
	}
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	log.Info("after") // a real t.Log here panics once the test has completed
	if len(r.lines) != 1 {
		t.Fatalf("lines after cleanup = %q, want only the first", r.lines)
	}
}
