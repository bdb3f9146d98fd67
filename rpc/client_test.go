package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestRoundTripEveryOp(t *testing.T) {
	fb := newFakeBackend()
	fb.status.Reason = "testing"
	srv := startServer(t, fb, nil)
	c := dialT(t, srv.Path())
	ctx := testCtx(t)

	if got := c.AgentVersion(); got != "test-1.2.3" {
		t.Errorf("AgentVersion = %q", got)
	}
	st, err := c.Status(ctx)
	if err != nil || !reflect.DeepEqual(st, fb.status) {
		t.Errorf("Status = %+v, %v; want %+v", st, err, fb.status)
	}
	l, err := c.Leader(ctx)
	if err != nil || l != *fb.leader {
		t.Errorf("Leader = %+v, %v; want %+v", l, err, *fb.leader)
	}
	ms, err := c.Members(ctx)
	if err != nil || !reflect.DeepEqual(ms, fb.members) {
		t.Errorf("Members = %+v, %v; want %+v", ms, err, fb.members)
	}
	if err := c.Resign(ctx); err != nil {
		t.Errorf("Resign: %v", err)
	}
}

func TestEmptyMembersIsNotNil(t *testing.T) {
	fb := newFakeBackend()
	fb.members = nil
	c := dialT(t, startServer(t, fb, nil).Path())
	ms, err := c.Members(testCtx(t))
	if err != nil || ms == nil || len(ms) != 0 {
		t.Fatalf("Members = %#v, %v; want an empty slice", ms, err)
	}
}

func TestSentinelErrors(t *testing.T) {
	fb := newFakeBackend()
	fb.leader = nil
	fb.resignErr = fmt.Errorf("agent: n1 follows n3: %w", ErrNotLeader)
	c := dialT(t, startServer(t, fb, nil).Path())
	ctx := testCtx(t)

	_, err := c.Leader(ctx)
	if !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader error = %v, want ErrNoLeader", err)
	}
	if want := "rpc: no leader: no leader elected yet"; err.Error() != want {
		t.Errorf("Leader error text = %q, want %q", err, want)
	}
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeNoLeader {
		t.Errorf("Leader error = %#v, want an *Error with code %q", err, CodeNoLeader)
	}
	err = c.Resign(ctx)
	if !errors.Is(err, ErrNotLeader) || !strings.Contains(err.Error(), "n1 follows n3") {
		t.Fatalf("Resign error = %v, want ErrNotLeader carrying the agent's message", err)
	}
	if _, err := c.Status(ctx); err != nil {
		t.Fatalf("Status after errors: %v", err)
	}
}

func TestInternalErrorHidesDetails(t *testing.T) {
	fb := newFakeBackend()
	fb.membErr = errors.New("open /var/lib/tenure/secret: disk on fire")
	c := dialT(t, startServer(t, fb, nil).Path())
	_, err := c.Members(testCtx(t))
	if !errors.Is(err, ErrInternal) {
		t.Fatalf("Members error = %v, want ErrInternal", err)
	}
	if strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("internal error leaked the backend's message: %v", err)
	}
}

func TestUnknownOpKeepsConnection(t *testing.T) {
	c := dialT(t, startServer(t, newFakeBackend(), nil).Path())
	ctx := testCtx(t)
	before := c.cc
	if err := c.call(ctx, "frobnicate", nil); !errors.Is(err, ErrUnknownOp) {
		t.Fatalf("unknown op error = %v, want ErrUnknownOp", err)
	}
	if _, err := c.Status(ctx); err != nil {
		t.Fatalf("Status after unknown op: %v", err)
	}
	if c.cc != before {
		t.Error("the client redialled; the connection should have stayed usable")
	}
}

func TestErrorCodesMapToSentinels(t *testing.T) {
	for _, code := range knownCodes() {
		e := newError(code, "detail")
		if !errors.Is(e, sentinel(code)) {
			t.Errorf("code %q does not unwrap to its sentinel", code)
		}
		back, ok := wireError(fmt.Errorf("context: %w", sentinel(code)))
		if !ok || back.Code != code || back.Message != "context" {
			t.Errorf("wireError for %q = %+v, %v", code, back, ok)
		}
		if !strings.HasPrefix(sentinel(code).Error(), "rpc: ") {
			t.Errorf("sentinel for %q lacks the rpc: prefix", code)
		}
	}
	if e := newError("from_the_future", "x"); errors.Unwrap(e) != nil || e.Error() == "" {
		t.Errorf("unknown code: %v unwraps to %v", e, errors.Unwrap(e))
	}
}

func TestCallBoundedByContext(t *testing.T) {
	fb := newFakeBackend()
	release := make(chan struct{})
	fb.block = release
	c := dialT(t, startServer(t, fb, nil).Path())

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Status(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Status error = %v, want DeadlineExceeded", err)
	}
	recv(t, fb.entered, "the blocked Status call")

	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		select { // the second call reached the backend
		case <-fb.entered:
		case <-time.After(testTimeout):
		}
		cancel()
	}()
	if _, err := c.Status(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Status error = %v, want Canceled", err)
	}

	close(release)
	if _, err := c.Status(testCtx(t)); err != nil {
		t.Fatalf("Status after abandoned calls: %v", err)
	}
}

func TestClientConcurrentUse(t *testing.T) {
	c := dialT(t, startServer(t, newFakeBackend(), nil).Path())
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8*20)
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if _, err := c.Status(ctx); err != nil {
					errs <- err
				}
				if _, err := c.Members(ctx); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestClientClose(t *testing.T) {
	c := dialT(t, startServer(t, newFakeBackend(), nil).Path())
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.Status(testCtx(t)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Status after Close = %v, want net.ErrClosed", err)
	}
	if _, err := c.Watch(testCtx(t)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Watch after Close = %v, want net.ErrClosed", err)
	}
}

func TestClientRedialsAfterAgentRestart(t *testing.T) {
	fb := newFakeBackend()
	srv := startServer(t, fb, nil)
	c := dialT(t, srv.Path())
	srv.Close()
	if _, err := c.Status(testCtx(t)); err == nil {
		t.Fatal("Status succeeded with the agent gone")
	}
	if _, err := c.Status(testCtx(t)); !errors.Is(err, ErrAgentUnreachable) {
		t.Fatalf("Status with no agent = %v, want ErrAgentUnreachable", err)
	}
	srv2, err := Listen(ServerConfig{Path: srv.Path(), Backend: fb, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close()
	if _, err := c.Status(testCtx(t)); err != nil {
		t.Fatalf("Status after restart: %v", err)
	}
}

func TestResponseTooLarge(t *testing.T) {
	fb := newFakeBackend()
	for i := range 100 {
		fb.members = append(fb.members, Member{Name: strings.Repeat("x", 40) + fmt.Sprint(i)})
	}
	c := dialT(t, startServer(t, fb, func(cfg *ServerConfig) { cfg.MaxFrame = 1024 }).Path())
	ctx := testCtx(t)
	if _, err := c.Members(ctx); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("Members error = %v, want ErrFrameTooLarge", err)
	}
	if _, err := c.Status(ctx); err != nil {
		t.Fatalf("Status after an oversized response: %v", err)
	}
}

func TestServerCloseDuringCall(t *testing.T) {
	fb := newFakeBackend()
	fb.block = make(chan struct{}) // never released: only Close's cancel ends the call
	srv := startServer(t, fb, nil)
	c := dialT(t, srv.Path())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Status(testCtx(t))
		errc <- err
	}()
	recv(t, fb.entered, "the blocked Status call")
	srv.Close()
	if err := recv(t, errc, "Status to return"); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("Status during Close = %v, want ErrShuttingDown", err)
	}
}

func TestCheckAndForceLeave(t *testing.T) {
	fb := newFakeBackend()
	fb.set(func(f *fakeBackend) {
		f.status.IsLeader = true
		f.status.Epoch = 7
		f.status.Leader = &LeaderInfo{Node: "n1", ID: 1, Epoch: 7}
	})
	srv := startServer(t, fb, nil)
	cl := dialT(t, srv.Path())
	ctx := testCtx(t)
	res, err := cl.Check(ctx, 7)
	if err != nil || !res.Current || !res.IsLeader {
		t.Fatalf("check 7 = %+v, %v; want current", res, err)
	}
	if res, err := cl.Check(ctx, 6); err != nil || res.Current {
		t.Fatalf("check 6 = %+v, %v; want not current", res, err)
	}
	if err := cl.ForceLeave(ctx, "gone"); err != nil {
		t.Fatalf("force-leave gone: %v", err)
	}
	if err := cl.ForceLeave(ctx, "n9"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("force-leave n9 = %v, want ErrNotFound", err)
	}
	if err := cl.ForceLeave(ctx, ""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("force-leave \"\" = %v, want ErrInvalidArgument", err)
	}
}

// TestOnRequestCountsEveryRequest: the server calls OnRequest once per
// request frame, whatever the op.
func TestOnRequestCountsEveryRequest(t *testing.T) {
	var n atomic.Int64
	c := dialT(t, startServer(t, newFakeBackend(), func(cfg *ServerConfig) { cfg.OnRequest = func() { n.Add(1) } }).Path())
	ctx := testCtx(t)
	for i := 0; i < 5; i++ {
		if _, err := c.Leader(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Status(ctx); err != nil {
		t.Fatal(err)
	}
	if got := n.Load(); got != 6 {
		t.Fatalf("OnRequest called %d times for 6 requests", got)
	}
}
