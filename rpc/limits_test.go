package rpc

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/wire"
)

// TestOnePeerCannotTakeEverySlot: with the default limits, 64 greeted,
// idle connections from this process get only its share (16) of the 64
// slots, and another client process is still served.
func TestOnePeerCannotTakeEverySlot(t *testing.T) {
	if !peerSupported {
		t.Skip("needs SO_PEERCRED")
	}
	srv := startServer(t, newFakeBackend(), nil)
	var admitted, busy int
	for range DefaultMaxConns {
		c, err := Dial(testCtx(t), srv.Path())
		switch {
		case err == nil:
			admitted++
			defer c.Close()
		case errors.Is(err, ErrBusy):
			busy++
		default:
			t.Fatalf("Dial: %v", err)
		}
	}
	if admitted != DefaultMaxConns/4 || busy != DefaultMaxConns-admitted {
		t.Fatalf("admitted %d, refused %d; want %d and %d", admitted, busy, DefaultMaxConns/4, DefaultMaxConns-DefaultMaxConns/4)
	}
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = []string{probeEnv + "=" + srv.Path()}
	if err := cmd.Run(); err != nil {
		t.Fatalf("another client process was not served: %v", err)
	}
}

// TestSilentConnectionsDroppedAtHelloDeadline: connections that never say
// hello hold at most their share of the slots (16), are closed at the
// default hello deadline (2 s), and do not keep a greeting client out.
func TestSilentConnectionsDroppedAtHelloDeadline(t *testing.T) {
	srv := startServer(t, newFakeBackend(), func(cfg *ServerConfig) { cfg.MaxConnsPerPeer = DefaultMaxConns })
	start := time.Now()
	silent := make([]*raw, DefaultMaxConns/4)
	for i := range silent {
		silent[i] = dialRaw(t, srv.Path())
	}
	// The share is full: one more connection is refused at once.
	dialRaw(t, srv.Path()).expectError(CodeBusy)
	for _, r := range silent {
		r.expectClosed()
	}
	took := time.Since(start)
	if took < DefaultHandshakeTimeout-100*time.Millisecond || took > DefaultHandshakeTimeout+2*time.Second {
		t.Fatalf("silent connections closed after %v, want about %v", took, DefaultHandshakeTimeout)
	}
	checkServing(t, srv.Path())
}

// TestMalformedFloodLogsFewLines: 10,000 connections that send garbage,
// and the refusals they cause, produce a handful of warnings, not one each.
func TestMalformedFloodLogsFewLines(t *testing.T) {
	lines := &countHandler{}
	srv := startServer(t, newFakeBackend(), func(cfg *ServerConfig) { cfg.Logger = slog.New(lines) })
	const conns, workers = 10000, 8
	var wg sync.WaitGroup
	var next atomic.Int64
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= conns {
				sendGarbage(t, srv.Path())
			}
		}()
	}
	wg.Wait()
	checkServing(t, srv.Path())
	if n := lines.warns.Load(); n > 6 {
		t.Fatalf("%d connections logged %d warnings, want at most 6", conns, n)
	} else {
		t.Logf("%d malformed connections: %d warning lines", conns, n)
	}
}

// sendGarbage connects, sends a frame that is not msgpack, and reads until
// the server closes.
func sendGarbage(t *testing.T, path string) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		t.Errorf("dial: %v", err)
		return
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(testTimeout))
	_ = wire.WriteFrame(nc, []byte{0xc1, 0xc1, 0xc1})
	for {
		if _, err := wire.ReadFrame(nc, wire.DefaultMaxFrame); err != nil {
			return
		}
	}
}

// countHandler counts the warnings logged.
type countHandler struct{ warns atomic.Int64 }

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.warns.Add(1)
	}
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }

// TestRateLogCountsRepeats: within the interval a message is counted, not
// logged; the next line after it carries the count.
func TestRateLogCountsRepeats(t *testing.T) {
	h := &countHandler{}
	l := slog.New(h)
	now := time.Unix(100, 0)
	r := newRateLog(time.Second)
	r.now = func() time.Time { return now }
	for range 5 {
		r.warn(l, "a")
	}
	r.warn(l, "b")
	if n := h.warns.Load(); n != 2 {
		t.Fatalf("%d lines within the interval, want 2 (one per message)", n)
	}
	now = now.Add(time.Second)
	r.warn(l, "a")
	r.flush()
	if n := h.warns.Load(); n != 3 {
		t.Fatalf("%d lines, want 3", n)
	}
}

// TestIdleTimeoutDefaults: idle greeted connections are closed after a
// minute by default; a negative IdleTimeout turns it off.
func TestIdleTimeoutDefaults(t *testing.T) {
	base := ServerConfig{Path: "x", Backend: newFakeBackend()}
	c, err := base.withDefaults()
	if err != nil || c.IdleTimeout != DefaultIdleTimeout || c.HandshakeTimeout != DefaultHandshakeTimeout ||
		c.MaxConnsPerPeer != 16 || c.MaxUngreeted != 16 {
		t.Fatalf("defaults = %+v, %v", c, err)
	}
	base.IdleTimeout = -1
	if c, err = base.withDefaults(); err != nil || c.IdleTimeout != 0 {
		t.Fatalf("IdleTimeout -1 gives %v, %v; want 0 (never)", c.IdleTimeout, err)
	}
	base.MaxConns, base.MaxConnsPerPeer = 4, 8
	if _, err = base.withDefaults(); err == nil {
		t.Fatal("a per-peer share above MaxConns was accepted")
	}
}
