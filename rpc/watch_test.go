package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

func memberEvent(name string) Event {
	m := &Member{Name: name, ID: 9, Status: MemberAlive, Voter: true}
	return Event{Time: "2025-01-02T03:04:06.5Z", Event: EventMemberJoin, Node: name, Member: m}
}

func nextEvent(t *testing.T, w *Watcher) Event {
	t.Helper()
	ev, err := w.Next(testCtx(t))
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return ev
}

func TestWatchCurrentStateThenEventsInOrder(t *testing.T) {
	fb := newFakeBackend()
	srv := startServer(t, fb, nil)
	c := dialT(t, srv.Path())
	w, err := c.Watch(testCtx(t))
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer w.Close()
	sub := recv(t, fb.subs, "the subscription")

	first := nextEvent(t, w)
	if first.Event != EventLeaderChanged || first.Leader == nil || *first.Leader != *fb.leader {
		t.Fatalf("first event = %+v, want the current leader", first)
	}
	want := []Event{memberEvent("n4"), memberEvent("n5"),
		{Time: "2025-01-02T03:04:07Z", Event: EventNoLeader, Node: "n1"}}
	for _, ev := range want {
		sub.push(t, ev)
	}
	for i, w0 := range want {
		if got := nextEvent(t, w); !reflect.DeepEqual(got, w0) {
			t.Fatalf("event %d = %+v, want %+v", i, got, w0)
		}
	}
	// The Client stays usable while its watch runs.
	if _, err := c.Status(testCtx(t)); err != nil {
		t.Fatalf("Status during watch: %v", err)
	}

	srv.Close()
	if _, err := w.Next(testCtx(t)); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("Next after server Close = %v, want ErrShuttingDown", err)
	}
	if _, err := w.Next(testCtx(t)); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("second Next after end = %v, want the same error", err)
	}
}

// TestWatchEndedByBackendSaysTooSlow: the backend ends a subscription only
// to drop a watcher that fell behind; the client is told so.
func TestWatchEndedByBackendSaysTooSlow(t *testing.T) {
	fb := newFakeBackend()
	c := dialT(t, startServer(t, fb, nil).Path())
	w, err := c.Watch(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	recv(t, fb.subs, "the subscription").stop()
	nextEvent(t, w) // the current state
	if _, err := w.Next(testCtx(t)); !errors.Is(err, ErrTooSlow) {
		t.Fatalf("Next = %v, want ErrTooSlow", err)
	}
}

func TestWatchClientDisconnects(t *testing.T) {
	fb := newFakeBackend()
	srv := startServer(t, fb, nil)
	w, err := dialT(t, srv.Path()).Watch(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	sub := recv(t, fb.subs, "the subscription")
	sub.push(t, memberEvent("n4")) // in flight as the client leaves
	if err := w.Close(); err != nil {
		t.Fatalf("Watcher.Close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Watcher.Close: %v", err)
	}
	recv(t, sub.exited, "the server to cancel the subscription")
	if _, err := w.Next(testCtx(t)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Next after Close = %v, want net.ErrClosed", err)
	}
	checkServing(t, srv.Path())
}

func TestWatchNextBoundedByContext(t *testing.T) {
	fb := newFakeBackend()
	w, err := dialT(t, startServer(t, fb, nil).Path()).Watch(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sub := recv(t, fb.subs, "the subscription")
	nextEvent(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := w.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next = %v, want DeadlineExceeded", err)
	}
	sub.push(t, memberEvent("n4")) // the stream survives an abandoned Next
	if ev := nextEvent(t, w); ev.Node != "n4" {
		t.Fatalf("event = %+v, want n4's", ev)
	}
}

func TestWatchConnectionAcceptsNoRequests(t *testing.T) {
	fb := newFakeBackend()
	srv := startServer(t, fb, nil)
	r := dialRaw(t, srv.Path())
	r.hello()
	r.send(Request{Seq: 5, Op: OpWatch})
	sub := recv(t, fb.subs, "the subscription")
	var resp Response
	r.read(&resp)
	if resp.Seq != 5 || !resp.Stream || resp.Error != nil {
		t.Fatalf("first stream frame = %+v", resp)
	}
	r.send(Request{Seq: 6, Op: OpStatus})
	final := r.expectError(CodeBadRequest)
	if final.Seq != 5 || final.Stream {
		t.Fatalf("final frame = %+v, want seq 5, stream false", final)
	}
	r.expectClosed()
	recv(t, sub.exited, "the subscription to be cancelled")
}

// TestWatchSlowClientIsCutOff: a watcher that never reads fills its socket
// buffer; the server gives up after WriteTimeout, cancels the subscription
// and closes, while other clients are served all along.
func TestWatchSlowClientIsCutOff(t *testing.T) {
	const writeTimeout = 2 * time.Second
	fb := newFakeBackend()
	big := strings.Repeat("x", 8<<10)
	fb.flood = func(n int) Event { return Event{Event: EventMemberUpdate, Node: fmt.Sprint(big, n)} }
	srv := startServer(t, fb, func(cfg *ServerConfig) { cfg.WriteTimeout = writeTimeout })

	r := dialRaw(t, srv.Path())
	r.hello()
	r.send(Request{Seq: 1, Op: OpWatch})
	sub := recv(t, fb.subs, "the subscription") // and now never read from r

	served := serveUntil(t, dialT(t, srv.Path()), sub.exited, writeTimeout/2)
	// The socket buffer holds far fewer than 4 MiB of events: the server
	// must have blocked, not drained the flood into the buffer.
	if n := sub.sent.Load(); n*int64(len(big)) > 4<<20 {
		t.Fatalf("server wrote %d events of %d bytes to a client that reads nothing", n, len(big))
	}
	t.Logf("served %d Status calls while the watcher stalled; %d events were sent before the cut-off", served, sub.sent.Load())
	_ = r.nc.SetReadDeadline(time.Now().Add(testTimeout))
	if _, err := io.Copy(io.Discard, r.nc); err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Fatalf("draining the cut-off watcher: %v", err)
	}
	checkServing(t, srv.Path())
}

func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// serveUntil calls Status, each call bounded by perCall, until done closes;
// it returns how many calls succeeded and fails the test on any error.
func serveUntil(t *testing.T, c *Client, done <-chan struct{}, perCall time.Duration) int {
	t.Helper()
	deadline := time.After(testTimeout)
	for served := 0; ; served++ {
		ctx, cancel := context.WithTimeout(context.Background(), perCall)
		_, err := c.Status(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Status while a watcher stalls: %v", err)
		}
		select {
		case <-done:
			return served + 1
		case <-deadline:
			t.Fatal("the stalled watcher was never cut off")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestWatchAgentUnreachable(t *testing.T) {
	srv := startServer(t, newFakeBackend(), nil)
	c := dialT(t, srv.Path())
	srv.Close()
	if _, err := c.Watch(testCtx(t)); !errors.Is(err, ErrAgentUnreachable) {
		t.Fatalf("Watch with no agent = %v, want ErrAgentUnreachable", err)
	}
}
