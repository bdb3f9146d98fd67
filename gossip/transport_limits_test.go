package gossip

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/wire"
)

// provenConn dials addr and proves itself with one request, whose answer
// it reads.
func provenConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	frame, err := wire.Marshal(request{Body: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	c := rawConn(t, addr, nil)
	if err := wire.WriteFrame(c, frame); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := wire.ReadFrame(c, 0); err != nil {
		t.Fatalf("proving request: %v", err)
	}
	return c
}

// idleConns opens n connections to addr that send nothing.
func idleConns(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
	return conns
}

// freshCalls makes n calls from a new client each, so that each dials and
// proves a new connection, and returns the first error.
func freshCalls(t *testing.T, addr string, n int, cfg TransportConfig) error {
	t.Helper()
	for range n {
		client := listen(t, cfg)
		if _, err := client.Call(context.Background(), addr, []byte("x")); err != nil {
			return err
		}
		client.Close()
	}
	return nil
}

// TestIdleConnectionsCannotLockPeersOut is the attack of 260 idle TCP
// connections to the peer port (no key): peers still connect, each new
// connection closing the oldest unproven one; the refusals are logged once
// in the interval, with a count. With KeyedTLS the same holds for
// connections that never complete the handshake.
func TestIdleConnectionsCannotLockPeersOut(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "keyed"}[keyed]
		t.Run(name, func(t *testing.T) {
			logger, counts := testLogger(t, "did not prove themselves")
			cfg := TransportConfig{Logger: logger}
			clientCfg := TransportConfig{}
			if keyed {
				cfg.Wrap = newKeyed(t, testKey(1))
				clientCfg.Wrap = newKeyed(t, testKey(1))
			}
			server := listen(t, cfg)
			idleConns(t, server.Addr(), 260)
			if err := freshCalls(t, server.Addr(), 20, clientCfg); err != nil {
				t.Fatalf("a peer could not call while 260 idle connections were open: %v", err)
			}
			waitFor(t, 2*time.Second, "the idle connections beyond the limit to be closed", func() bool {
				return server.Refused() >= 260-DefaultMaxUnprovenConns
			})
			server.mu.Lock()
			unproven := len(server.unproven)
			server.mu.Unlock()
			if unproven > DefaultMaxUnprovenConns {
				t.Errorf("%d unproven connections held, limit %d", unproven, DefaultMaxUnprovenConns)
			}
			if n := counts["did not prove themselves"].Load(); n != 1 {
				t.Errorf("%d refusal lines for %d refusals within the interval, want 1", n, server.Refused())
			}
		})
	}
}

// TestUnprovenConnectionsTimeOut: a connection that sends nothing is closed
// after ProveTimeout; one that proved itself stays open while idle for less
// than twice IdleTimeout, and is closed after.
func TestUnprovenConnectionsTimeOut(t *testing.T) {
	server := listen(t, TransportConfig{ProveTimeout: 200 * time.Millisecond, IdleTimeout: time.Second})
	start := time.Now()
	silent := rawConn(t, server.Addr(), nil)
	proven := provenConn(t, server.Addr())
	if !closedByPeer(silent) {
		t.Fatal("silent connection still open after a second")
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("silent connection closed after %v, before ProveTimeout", d)
	}
	proven.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := proven.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("proven idle connection: %v, want it still open", err)
	}
	proven.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := proven.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("proven connection idle for over twice IdleTimeout still open")
	}
	if server.Refused() != 1 {
		t.Fatalf("refused %d, want the silent connection only", server.Refused())
	}
}

// TestRefusalLogOncePerInterval: the first refusal is logged at once, the
// rest of the interval's in one line with their count when it ends, and
// nothing when an interval ends without refusals; the next refusal is then
// logged at once. The test ends the intervals itself (tick).
func TestRefusalLogOncePerInterval(t *testing.T) {
	logger, counts := testLogger(t, "refused", "count=1 ", "count=5 ", "evicted=3", "too_slow=2")
	r := newRefusalLog(logger, slog.LevelWarn, "refused")
	r.interval = time.Hour // only tick ends an interval
	defer r.stop()
	r.note("evicted", "10.0.0.1:1", nil)
	if counts["count=1 "].Load() != 1 {
		t.Fatal("first refusal not logged at once")
	}
	for i := range 5 {
		reason := "evicted"
		if i < 2 {
			reason = "too_slow"
		}
		r.note(reason, "10.0.0.1:1", errors.New("x"))
	}
	if n := counts["refused"].Load(); n != 1 {
		t.Fatalf("%d lines within the interval, want 1", n)
	}
	r.tick()
	if counts["count=5 "].Load() != 1 || counts["evicted=3"].Load() != 1 || counts["too_slow=2"].Load() != 1 {
		t.Fatal("the interval's line with counts by reason is missing")
	}
	r.tick()
	if n := counts["refused"].Load(); n != 2 {
		t.Fatalf("%d lines after an interval without refusals, want 2", n)
	}
	r.note("evicted", "10.0.0.1:1", nil)
	if n := counts["refused"].Load(); n != 3 || r.Total() != 7 {
		t.Fatalf("after a quiet interval: %d lines, total %d; want 3 lines, total 7", n, r.Total())
	}
	// Refusals of an open interval are logged when logging stops (the
	// transport closes), not lost.
	r.note("too_slow", "10.0.0.1:1", nil)
	r.stop()
	if n := counts["refused"].Load(); n != 4 {
		t.Fatalf("%d lines after stop, want 4: the interval's last refusal", n)
	}
	r.stop()
	r.note("evicted", "10.0.0.1:1", nil)
	if n := counts["refused"].Load(); n != 4 || r.Total() != 9 {
		t.Fatalf("after stop: %d lines, total %d; want 4 lines, total 9", n, r.Total())
	}
}
