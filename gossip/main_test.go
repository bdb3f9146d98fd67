package gossip

import (
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testlog"
	"github.com/tenurehq/tenure/internal/testwait"
)

// TestMain fails the run if any goroutine outlives the tests. Serf and
// memberlist stop theirs on Shutdown (some exit a moment later, a probe up
// to eight probe intervals: testwait.Leaks waits for them), so nothing is
// ignored.
func TestMain(m *testing.M) {
	testwait.VerifyTestMain(m)
}

// counter counts log lines containing given substrings.
type counter map[string]*atomic.Int64

func (c counter) Write(p []byte) (int, error) {
	for sub, n := range c {
		if strings.Contains(string(p), sub) {
			n.Add(1)
		}
	}
	return len(p), nil
}

// testLogger returns a logger that writes to t.Log until the test ends
// (testlog.New: goroutines that stop a moment after Shutdown may still
// log). Lines containing each of count are counted in the returned map.
func testLogger(t testing.TB, count ...string) (*slog.Logger, map[string]*atomic.Int64) {
	c := make(counter)
	for _, sub := range count {
		c[sub] = new(atomic.Int64)
	}
	counting := slog.NewTextHandler(c, &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(slog.NewMultiHandler(testlog.New(t, "").Handler(), counting)), c
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
