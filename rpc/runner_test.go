package rpc

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/wire"
)

// peerSupported: the server can tell its peers here (SO_PEERCRED).
var peerSupported = runtime.GOOS == "linux"

// runnerBody is a watch request body that registers a runner.
func runnerBody(t *testing.T, v any) []byte {
	t.Helper()
	b, err := wire.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRunnerWatchReportsStopped: a runner's watch registers its grace, its
// stopped reports reach the Backend in order while the stream goes on, and
// none arrives after the registration was cancelled.
func TestRunnerWatchReportsStopped(t *testing.T) {
	fb := newFakeBackend()
	srv := startServer(t, fb, nil)
	w, err := dialT(t, srv.Path()).WatchAsRunner(testCtx(t), 300*time.Millisecond)
	if err != nil {
		t.Fatalf("WatchAsRunner: %v", err)
	}
	defer w.Close()
	r := recv(t, fb.runners, "the runner's registration")
	sub := recv(t, fb.subs, "the runner's subscription")
	if r.grace != 300*time.Millisecond {
		t.Fatalf("registered grace %v, want 300ms", r.grace)
	}
	nextEvent(t, w) // the current state
	for _, e := range []uint64{7, 8} {
		if err := w.Stopped(testCtx(t), e); err != nil {
			t.Fatalf("Stopped(%d): %v", e, err)
		}
	}
	for _, want := range []uint64{7, 8} {
		if got := recv(t, r.stopped, "a stopped report"); got != want {
			t.Fatalf("stopped report %d, want %d", got, want)
		}
	}
	sub.push(t, memberEvent("n4"))
	if ev := nextEvent(t, w); ev.Node != "n4" {
		t.Fatalf("event after the reports = %+v, want n4's", ev)
	}
	w.Close()
	recv(t, sub.exited, "the subscription to be cancelled")
	if r.late.Load() {
		t.Fatal("a stopped report reached the Backend after cancel")
	}
}

// TestRunnerWatchEndsOnOtherFrames: on a runner's watch any frame but a
// well-formed stopped one ends the watch with bad_request.
func TestRunnerWatchEndsOnOtherFrames(t *testing.T) {
	for name, frame := range map[string]Request{
		"status":          {Seq: 2, Op: OpStatus},
		"no body":         {Seq: 2, Op: OpStopped},
		"epoch 0":         {Seq: 2, Op: OpStopped, Body: runnerBody(t, StoppedRequest{})},
		"string body":     {Seq: 2, Op: OpStopped, Body: runnerBody(t, "7")},
		"running pgid 1":  {Seq: 2, Op: OpRunning, Body: runnerBody(t, RunningRequest{Epoch: 4, PGID: 1})},
		"running pgid -5": {Seq: 2, Op: OpRunning, Body: runnerBody(t, RunningRequest{Epoch: 4, PGID: -5})},
		"running epoch 0": {Seq: 2, Op: OpRunning, Body: runnerBody(t, RunningRequest{PGID: 4000})},
		"running no body": {Seq: 2, Op: OpRunning},
	} {
		t.Run(name, func(t *testing.T) {
			fb := newFakeBackend()
			r := dialRaw(t, startServer(t, fb, nil).Path())
			r.hello()
			r.send(Request{Seq: 5, Op: OpWatch, Body: runnerBody(t, WatchRequest{Runner: &RunnerRequest{GraceMS: 100}})})
			sub := recv(t, fb.subs, "the subscription")
			var first Response
			r.read(&first)
			r.send(Request{Seq: 3, Op: OpStopped, Body: runnerBody(t, StoppedRequest{Epoch: 4})})
			r.send(frame)
			final := r.expectError(CodeBadRequest)
			if final.Seq != 5 || final.Stream {
				t.Fatalf("final frame = %+v, want seq 5, stream false", final)
			}
			r.expectClosed()
			recv(t, sub.exited, "the subscription to be cancelled")
			if got := recv(t, recv(t, fb.runners, "the runner").stopped, "the good report"); got != 4 {
				t.Fatalf("stopped report %d, want 4", got)
			}
		})
	}
}

// TestWatchRefusesBadBodies: a watch body that is not a map, or whose
// runner is not a map, is refused with bad_request before any event, and
// the connection closes; a runner without a sane grace is refused with
// invalid_argument, and the connection stays open; an empty map or a nil
// runner is a plain watch.
func TestWatchRefusesBadBodies(t *testing.T) {
	for name, tc := range map[string]struct {
		body any
		code string
	}{
		"not a map":      {7, CodeBadRequest},
		"runner not map": {map[string]any{"runner": "yes"}, CodeBadRequest},
		"grace 0":        {WatchRequest{Runner: &RunnerRequest{}}, CodeInvalidArgument},
		"grace too long": {WatchRequest{Runner: &RunnerRequest{GraceMS: uint64(MaxRunnerGrace/time.Millisecond) + 1}}, CodeInvalidArgument},
		"over backend":   {WatchRequest{Runner: &RunnerRequest{GraceMS: 2000}}, CodeInvalidArgument},
	} {
		t.Run(name, func(t *testing.T) {
			fb := newFakeBackend()
			fb.maxGrace = time.Second
			r := dialRaw(t, startServer(t, fb, nil).Path())
			r.hello()
			r.send(Request{Seq: 5, Op: OpWatch, Body: runnerBody(t, tc.body)})
			if resp := r.expectError(tc.code); resp.Seq != 5 || resp.Stream {
				t.Fatalf("refusal = %+v, want seq 5, stream false", resp)
			}
			if tc.code == CodeBadRequest {
				r.expectClosed()
				return
			}
			r.send(Request{Seq: 6, Op: OpStatus})
			var resp Response
			r.read(&resp)
			if resp.Seq != 6 || resp.Error != nil {
				t.Fatalf("status after the refused watch = %+v", resp)
			}
		})
	}
	for name, body := range map[string]any{"empty map": map[string]any{}, "nil runner": WatchRequest{}} {
		t.Run(name, func(t *testing.T) {
			fb := newFakeBackend()
			r := dialRaw(t, startServer(t, fb, nil).Path())
			r.hello()
			r.send(Request{Seq: 5, Op: OpWatch, Body: runnerBody(t, body)})
			var first Response
			r.read(&first)
			if first.Error != nil || !first.Stream {
				t.Fatalf("first frame = %+v, want an event", first)
			}
			r.send(Request{Seq: 6, Op: OpStopped, Body: runnerBody(t, StoppedRequest{Epoch: 1})})
			r.expectError(CodeBadRequest) // a plain watch accepts no frame at all
			if len(fb.runners) != 0 {
				t.Fatal("a plain watch registered a runner")
			}
		})
	}
}

// TestStoppedOutsideRunnerWatch: a stopped request on an ordinary
// connection is a frame where the protocol allows none: bad_request with
// its seq, and the connection closes.
func TestStoppedOutsideRunnerWatch(t *testing.T) {
	r := dialRaw(t, startServer(t, newFakeBackend(), nil).Path())
	r.hello()
	r.send(Request{Seq: 3, Op: OpStopped, Body: runnerBody(t, StoppedRequest{Epoch: 1})})
	if resp := r.expectError(CodeBadRequest); resp.Seq != 3 {
		t.Fatalf("refusal seq %d, want 3", resp.Seq)
	}
	r.expectClosed()
}

// TestClientRunnerChecks: the client refuses a grace outside the bounds
// and Stopped on a plain watch (sending nothing, so the watch goes on), and
// reports a grace the agent refuses as ErrBadRequest.
func TestClientRunnerChecks(t *testing.T) {
	fb := newFakeBackend()
	fb.maxGrace = time.Second
	c := dialT(t, startServer(t, fb, nil).Path())
	for _, g := range []time.Duration{0, time.Microsecond, MaxRunnerGrace + time.Millisecond} {
		if _, err := c.WatchAsRunner(testCtx(t), g); err == nil {
			t.Errorf("WatchAsRunner(%v) succeeded", g)
		}
	}
	if _, err := c.WatchAsRunner(testCtx(t), 2*time.Second); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("WatchAsRunner over the agent's limit = %v, want ErrInvalidArgument", err)
	}
	w, err := c.Watch(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sub := recv(t, fb.subs, "the plain subscription")
	nextEvent(t, w)
	if err := w.Stopped(testCtx(t), 3); err == nil {
		t.Fatal("Stopped on a plain watch succeeded")
	}
	sub.push(t, memberEvent("n4"))
	if ev := nextEvent(t, w); ev.Node != "n4" {
		t.Fatalf("event = %+v, want n4's: the plain watch must go on", ev)
	}
}

// TestRunnerWatchReportsRunning: a runner's running frames reach the
// Backend with the connecting process as the peer.
func TestRunnerWatchReportsRunning(t *testing.T) {
	fb := newFakeBackend()
	srv := startServer(t, fb, nil)
	w, err := dialT(t, srv.Path()).WatchAsRunner(testCtx(t), 300*time.Millisecond)
	if err != nil {
		t.Fatalf("WatchAsRunner: %v", err)
	}
	defer w.Close()
	r := recv(t, fb.runners, "the runner's registration")
	if err := w.Running(testCtx(t), 9, 4242); err != nil {
		t.Fatalf("Running: %v", err)
	}
	if got := recv(t, r.running, "a running report"); got != [2]uint64{9, 4242} {
		t.Fatalf("running report %v, want [9 4242]", got)
	}
	if want := os.Getpid(); peerSupported && (!r.peer.Known || r.peer.PID != want || r.peer.UID != os.Getuid()) {
		t.Fatalf("peer %+v, want pid %d uid %d", r.peer, want, os.Getuid())
	}
	if err := w.Running(testCtx(t), 9, 1); err == nil {
		t.Fatal("Running with pgid 1 succeeded on the client side")
	}
}
