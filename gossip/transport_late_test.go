package gossip

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/wire"
)

// holdWrap is a countingWrap whose client connections can hold what they
// write, as TCP does when a partition cuts the link: the writer is told the
// bytes are sent, and they reach the peer when the link comes back
// (release), however late.
type holdWrap struct {
	countingWrap
	mu    sync.Mutex
	conns []*holdConn
}

func (w *holdWrap) Client(conn net.Conn, addr string) (net.Conn, error) {
	c, err := w.countingWrap.Client(conn, addr)
	if err != nil {
		return nil, err
	}
	h := &holdConn{Conn: c}
	w.mu.Lock()
	w.conns = append(w.conns, h)
	w.mu.Unlock()
	return h, nil
}

// cut makes every client connection hold its writes; heal sends them.
func (w *holdWrap) cut() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.conns {
		c.mu.Lock()
		c.holding = true
		c.mu.Unlock()
	}
}

func (w *holdWrap) heal(t *testing.T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.conns {
		c.mu.Lock()
		c.holding = false
		held := c.held
		c.held = nil
		c.mu.Unlock()
		c.Conn.SetWriteDeadline(time.Time{}) // the caller's deadline passed long ago
		if _, err := c.Conn.Write(held); err != nil {
			t.Fatalf("deliver the held bytes: %v", err)
		}
	}
}

type holdConn struct {
	net.Conn
	mu      sync.Mutex
	holding bool
	held    []byte
}

func (c *holdConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holding {
		c.held = append(c.held, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// A request delivered after its caller gave up (held by a cut link) is not
// handled: its reply could only be dropped, and what it asked for (a vote,
// a hand-over, a resignation) was reported to the caller as failed.
func TestTransportLateRequestIsNotHandled(t *testing.T) {
	var mu sync.Mutex
	var handled []string
	record := func(_ context.Context, req []byte) ([]byte, error) {
		mu.Lock()
		handled = append(handled, string(req))
		mu.Unlock()
		return req, nil
	}
	wrap := &holdWrap{countingWrap: countingWrap{greeting: 5}}
	const logged = `level=INFO msg="gossip: peer requests that came after their callers had given up`
	logger, lines := testLogger(t, logged)
	server := listen(t, TransportConfig{Handler: record, Wrap: wrap, Logger: logger})
	client := listen(t, TransportConfig{Wrap: wrap})
	if got := call(t, client, server.Addr(), "before"); got != "before" {
		t.Fatalf("got %q", got)
	}

	wrap.cut()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := client.Call(ctx, server.Addr(), []byte("late")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call over the cut link: %v, want a deadline", err)
	}
	time.Sleep(200 * time.Millisecond)
	wrap.heal(t) // "late" arrives 200 ms after its caller gave up

	waitFor(t, 5*time.Second, "the late request refused", func() bool { return server.LateRequests() == 1 })
	waitFor(t, 5*time.Second, "the refusal dropped as a late response", func() bool { return client.LateResponses() == 1 })
	if got := call(t, client, server.Addr(), "after"); got != "after" {
		t.Fatalf("got %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(handled, []string{"before", "after"}) {
		t.Fatalf("handled %q; the late request must not be", handled)
	}
	if d := client.Dialed(); d != 1 {
		t.Fatalf("dialled %d connections, want 1: a refused late request keeps its connection", d)
	}
	if n := lines[logged].Load(); n != 1 {
		t.Fatalf("%d INFO lines about late requests, want 1", n)
	}
}

// A request that arrives in time but is still being handled when its
// caller gives up sees its context end then, not HandlerTimeout later.
func TestTransportHandlerContextEndsWithTheCaller(t *testing.T) {
	deadlines := make(chan time.Duration, 1)
	server := listen(t, TransportConfig{HandlerTimeout: time.Minute, Handler: func(ctx context.Context, req []byte) ([]byte, error) {
		d, _ := ctx.Deadline()
		deadlines <- time.Until(d)
		return req, nil
	}})
	client := listen(t, TransportConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := client.Call(ctx, server.Addr(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	// The server's view of the caller's deadline is never earlier than the
	// caller's, and later only by the connect's duration and a thousandth
	// of the connection's age (for clocks that run apart).
	if left := <-deadlines; left > 400*time.Millisecond || left <= 0 {
		t.Fatalf("handler had %v left, want at most the caller's 300 ms", left)
	}
}

// Requests from an older release carry no deadline and are handled as
// before, bounded by HandlerTimeout alone.
func TestTransportRequestWithoutDeadlineIsHandled(t *testing.T) {
	server := listen(t, TransportConfig{})
	conn := rawConn(t, server.Addr(), rawRequest(t, request{Body: []byte("old")}))
	defer conn.Close()
	resp := readResponse(t, conn)
	if resp.Err != "" || string(resp.Body) != "echo:old" {
		t.Fatalf("response %+v", resp)
	}
	if n := server.LateRequests(); n != 0 {
		t.Fatalf("late requests %d", n)
	}
}

func TestLateByAllowsForClockRates(t *testing.T) {
	for _, c := range []struct {
		age, until time.Duration
		late       bool
	}{
		{age: time.Second, until: 2 * time.Second},
		{age: 2 * time.Second, until: 2 * time.Second},
		{age: 2002 * time.Millisecond, until: 2 * time.Second}, // within 1/1000 of the age
		{age: 2010 * time.Millisecond, until: 2 * time.Second, late: true},
		{age: 10 * time.Minute, until: 10*time.Minute - 500*time.Millisecond},
		{age: 10 * time.Minute, until: 10*time.Minute - 700*time.Millisecond, late: true},
	} {
		late := lateBy(c.age, uint64(c.until/time.Millisecond)) > 0
		if late != c.late {
			t.Errorf("age %v, caller's deadline %v: late %v, want %v", c.age, c.until, late, c.late)
		}
	}
	if late := lateBy(time.Hour, math.MaxUint64); late > 0 {
		t.Errorf("the largest deadline stamp is late by %v; it must not wrap around", late)
	}
	if !strings.Contains(errLateRequest(1500*time.Millisecond).Error(), "1.5s after its caller gave up") {
		t.Errorf("message %q", errLateRequest(1500*time.Millisecond))
	}
}

// rawRequest encodes req as a frame, as a peer writes it.
func rawRequest(t *testing.T, req request) []byte {
	t.Helper()
	body, err := wire.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := wire.WriteFrame(&buf, body); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func readResponse(t *testing.T, conn net.Conn) response {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	body, err := wire.ReadFrame(conn, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var resp response
	if err := wire.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

// FuzzRequestDeadline: any request body a peer sends decodes or is
// refused, and a decoded one's time to handle is bounded by
// HandlerTimeout whatever its deadline stamp and its connection's age.
func FuzzRequestDeadline(f *testing.F) {
	for _, u := range []uint64{0, 1, 2000, math.MaxInt64, math.MaxUint64} {
		b, _ := wire.Marshal(request{Body: []byte("x"), Until: u})
		f.Add(b, int64(1500))
	}
	tr := &Transport{cfg: TransportConfig{HandlerTimeout: 2 * time.Second}}
	f.Fuzz(func(t *testing.T, body []byte, ageMs int64) {
		var req request
		if wire.Unmarshal(body, &req) != nil {
			return
		}
		age := time.Duration(ageMs%(24*3600*1000)) * time.Millisecond
		in := &inbound{at: time.Now().Add(-age)}
		if left := tr.callerWaits(req, in); left > tr.cfg.HandlerTimeout {
			t.Fatalf("until %d, age %v: %v to handle, more than the handler timeout", req.Until, age, left)
		}
	})
}
