//go:build unix

package hooks

import (
	"context"
	"fmt"
	"github.com/tenurehq/tenure/internal/procgroup"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds every wait in the tests; reaching it is a failure.
const testTimeout = 10 * time.Second

// logRecord is one log record, its attributes flattened to strings.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (r logRecord) String() string {
	return fmt.Sprintf("%s %q %v", r.level, r.msg, r.attrs)
}

// logStore keeps every record a test's Runner logs, and echoes it to t.Log.
type logStore struct {
	t       testing.TB
	mu      sync.Mutex
	recs    []logRecord
	changed chan struct{} // closed and replaced when a record is added
}

func newLogStore(t testing.TB) *logStore {
	return &logStore{t: t, changed: make(chan struct{})}
}

func (s *logStore) add(r logRecord) {
	s.t.Log(r.String())
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, r)
	close(s.changed)
	s.changed = make(chan struct{})
}

// find returns the records for which match holds.
func (s *logStore) find(match func(logRecord) bool) []logRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []logRecord
	for _, r := range s.recs {
		if match(r) {
			out = append(out, r)
		}
	}
	return out
}

// wait returns the first record for which match holds, waiting for it.
func (s *logStore) wait(t *testing.T, what string, match func(logRecord) bool) logRecord {
	t.Helper()
	deadline := time.After(testTimeout)
	for {
		s.mu.Lock()
		i := slices.IndexFunc(s.recs, match)
		var r logRecord
		if i >= 0 {
			r = s.recs[i]
		}
		changed := s.changed
		s.mu.Unlock()
		if i >= 0 {
			return r
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("timed out waiting for a log record: %s", what)
		}
	}
}

// finished matches the end-of-run record of hook for event with epoch.
func finished(hook, event string, epoch uint64) func(logRecord) bool {
	return func(r logRecord) bool {
		return r.msg == "hooks: run finished" && r.attrs["hook"] == hook &&
			r.attrs["event"] == event && r.attrs["epoch"] == strconv.FormatUint(epoch, 10)
	}
}

// recHandler is a slog.Handler feeding a logStore.
type recHandler struct {
	store *logStore
	attrs []slog.Attr
}

func (h recHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h recHandler) Handle(_ context.Context, r slog.Record) error {
	m := make(map[string]string)
	for _, a := range h.attrs {
		m[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	h.store.add(logRecord{level: r.Level, msg: r.Message, attrs: m})
	return nil
}

func (h recHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return recHandler{store: h.store, attrs: append(slices.Clip(h.attrs), as...)}
}

func (h recHandler) WithGroup(string) slog.Handler { return h }

// harness is a Runner under test with an output directory ($OUT in the
// hooks' environment) and its logs.
type harness struct {
	t    *testing.T
	r    *Runner
	dir  string
	logs *logStore
}

// start builds a Runner from cfg (Logger and Env filled in) and closes it
// when the test ends, if the test did not.
func start(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, dir: t.TempDir(), logs: newLogStore(t)}
	cfg.Logger = slog.New(recHandler{store: h.logs})
	cfg.Env = append(os.Environ(), "OUT="+h.dir)
	r, err := NewRunner(cfg)
	if err != nil {
		t.Fatalf("NewRunner: %v", err)
	}
	h.r = r
	t.Cleanup(func() { h.close() })
	return h
}

// close closes the Runner, failing the test if that takes testTimeout.
func (h *harness) close() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := h.r.Close(ctx); err != nil {
		h.t.Errorf("Close: %v", err)
	}
}

func (h *harness) path(name string) string { return filepath.Join(h.dir, name) }

// waitFile waits until the named file in the output directory exists and
// is not empty, and returns its content.
func (h *harness) waitFile(name string) string {
	h.t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		b, err := os.ReadFile(h.path(name))
		if err == nil && len(b) > 0 {
			return string(b)
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for file %s", name)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// readFile returns a file of the output directory ("" when missing).
func (h *harness) readFile(name string) string {
	b, _ := os.ReadFile(h.path(name))
	return string(b)
}

// waitPID reads a PID the hook wrote to a file.
func (h *harness) waitPID(name string) int {
	h.t.Helper()
	s := strings.TrimSpace(h.waitFile(name))
	pid, err := strconv.Atoi(s)
	if err != nil {
		h.t.Fatalf("file %s: bad pid %q", name, s)
	}
	return pid
}

// processGone reports whether pid has exited: no such process, or a zombie
// waiting for a reaper that is not this test.
func processGone(pid int) bool { return procgroup.Gone(pid) }

// waitGone waits until pid has exited.
func waitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs after %v", pid, within)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// event builds a leadership event led by n1 with epoch.
func event(name string, epoch uint64) Event {
	return Event{
		Event:  name,
		Time:   time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC),
		Node:   "n1",
		NodeID: 1,
		Leader: &LeaderRef{Node: "n1", ID: 1, Epoch: epoch},
		Epoch:  epoch,
	}
}
