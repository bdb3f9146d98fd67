package rpc

import (
	"errors"
	"testing"
	"time"
)

// TestResignHoldDrainTransfer: resign carries its hold (none for a plain
// resign, bounded above), drain and its end reach the backend, transfer
// names its member and maps the backend's errors.
func TestResignHoldDrainTransfer(t *testing.T) {
	fb := newFakeBackend()
	c := dialT(t, startServer(t, fb, nil).Path())
	ctx := testCtx(t)
	hold := func() uint64 {
		fb.mu.Lock()
		defer fb.mu.Unlock()
		return fb.resignHold
	}
	if err := c.ResignFor(ctx, 90*time.Second); err != nil || hold() != 90000 {
		t.Fatalf("ResignFor(90s): %v, hold %d ms", err, hold())
	}
	if err := c.Resign(ctx); err != nil || hold() != 0 {
		t.Fatalf("Resign: %v, hold %d ms; want the agent's default (0)", err, hold())
	}
	if err := c.ResignFor(ctx, MaxResignHold+time.Millisecond); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a hold over MaxResignHold: %v", err)
	}
	if err := c.ResignFor(ctx, -time.Second); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a negative hold: %v", err)
	}
	for _, on := range []bool{true, false} {
		if err := c.Drain(ctx, on); err != nil {
			t.Fatal(err)
		}
		if st, err := c.Status(ctx); err != nil || st.Drained != on {
			t.Fatalf("after Drain(%v): drained %v, %v", on, st.Drained, err)
		}
	}
	if err := c.Transfer(ctx, "n2"); err != nil {
		t.Fatalf("Transfer(n2): %v", err)
	}
	if err := c.Transfer(ctx, "n9"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Transfer(n9): %v, want not_found", err)
	}
	if err := c.Transfer(ctx, ""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Transfer(\"\"): %v, want invalid_argument", err)
	}
}

// TestDrainAndTransferNeedBodies: drain and transfer without a body, or
// with one of the wrong shape, are bad requests, answered with their seq,
// and the connection closes; a hold too long is an invalid argument that
// leaves it open; resign with a nil body is a plain resign.
func TestDrainAndTransferNeedBodies(t *testing.T) {
	srv := startServer(t, newFakeBackend(), nil)
	for i, req := range []map[string]any{
		{"seq": 1, "op": OpDrain},
		{"seq": 2, "op": OpTransfer},
		{"seq": 3, "op": OpTransfer, "body": map[string]any{"name": 7}},
		{"seq": 4, "op": OpResign, "body": "now"},
	} {
		r := dialRaw(t, srv.Path())
		r.hello()
		r.send(req)
		if resp := r.expectError(CodeBadRequest); resp.Seq != uint64(i+1) {
			t.Fatalf("request %d answered with seq %d", i+1, resp.Seq)
		}
		r.expectClosed()
	}
	r := dialRaw(t, srv.Path())
	r.hello()
	r.send(map[string]any{"seq": 5, "op": OpResign, "body": map[string]any{"hold_ms": uint64(1) << 63}})
	if resp := r.expectError(CodeInvalidArgument); resp.Seq != 5 {
		t.Fatalf("hold too long answered with seq %d", resp.Seq)
	}
	r.send(map[string]any{"seq": 6, "op": OpResign, "body": nil})
	var resp Response
	r.read(&resp)
	if resp.Seq != 6 || resp.Error != nil {
		t.Fatalf("resign with a nil body: %+v", resp)
	}
}
