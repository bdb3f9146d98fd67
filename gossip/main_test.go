package gossip

import (
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testwait"
)

// TestMain fails the run if any goroutine outlives the tests. Serf and
// memberlist stop theirs on Shutdown (some exit a moment later, a probe up
// to eight probe intervals: testwait.Leaks waits for them), so nothing is
// ignored.
func TestMain(m *testing.M) {
	testwait.VerifyTestMain(m)
}

// logSink writes log lines to t.Log until the test ends, and counts lines
// containing given substrings.
type logSink struct {
	mu   sync.Mutex
	t    testing.TB
	done bool

	counters map[string]*atomic.Int64
}

func (s *logSink) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\n")
	for sub, c := range s.counters {
		if strings.Contains(line, sub) {
			c.Add(1)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		s.t.Log(line)
	}
	return len(p), nil
}

// testLogger returns a logger that writes to t.Log and stops when the test
// ends (goroutines that stop a moment after Shutdown may still log). Lines
// containing each of count are counted in the returned map.
func testLogger(t testing.TB, count ...string) (*slog.Logger, map[string]*atomic.Int64) {
	s := &logSink{t: t, counters: make(map[string]*atomic.Int64)}
	for _, c := range count {
		s.counters[c] = new(atomic.Int64)
	}
	t.Cleanup(func() { // registered first, so it runs after every other cleanup
		s.mu.Lock()
		s.done = true
		s.mu.Unlock()
	})
	h := slog.NewTextHandler(s, &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(h), s.counters
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// freePort returns a loopback port that was free for both TCP and UDP a
// moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		pc, err := net.ListenPacket("udp", ln.Addr().String())
		if err == nil {
			pc.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}
