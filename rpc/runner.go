package rpc

import (
	"fmt"
	"time"

	"github.com/tenurehq/tenure/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// A runner is a watching connection that registered with a WatchRequest
// carrying a RunnerRequest: a process, such as `tenure run`, that runs work
// only while this node leads. Besides reading its stream it may send
// stopped frames (OpStopped), which the server hands to the Backend without
// answering them. See docs/PROTOCOL.md section 6.8.

// subscription is a watch's event stream from the Backend.
type subscription struct {
	events  <-chan Event
	stopped func(epoch uint64) // nil unless the watcher registered as a runner
	cancel  func()
}

// subscribe starts the subscription a watch request's body asks for: a
// plain one, or a runner's.
func (c *conn) subscribe(body msgpack.RawMessage) (subscription, error) {
	var req WatchRequest
	if err := decodeOptional(body, &req); err != nil {
		return subscription{}, err
	}
	b := c.srv.cfg.Backend
	if req.Runner == nil {
		events, cancel, err := b.Watch(c.srv.ctx)
		return subscription{events: events, cancel: cancel}, err
	}
	grace, err := req.Runner.grace()
	if err != nil {
		return subscription{}, err
	}
	events, stopped, cancel, err := b.WatchRunner(c.srv.ctx, grace)
	return subscription{events: events, stopped: stopped, cancel: cancel}, err
}

// grace checks the runner's grace and returns it.
func (r RunnerRequest) grace() (time.Duration, error) {
	if r.GraceMS == 0 || r.GraceMS > uint64(MaxRunnerGrace/time.Millisecond) {
		return 0, fmt.Errorf("%w: runner grace_ms must be between 1 and %d, not %d",
			ErrBadRequest, MaxRunnerGrace/time.Millisecond, r.GraceMS)
	}
	return time.Duration(r.GraceMS) * time.Millisecond, nil
}

// decodeOptional decodes a request body that may be absent or nil.
func decodeOptional(body msgpack.RawMessage, v any) error {
	if len(body) == 0 || (len(body) == 1 && body[0] == msgpcode.Nil) {
		return nil
	}
	if err := wire.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return nil
}

// watchPeer reads from the connection during a watch. A plain watcher must
// send nothing: its first frame ends the watch. A runner (stopped not nil)
// may send stopped frames, handed to stopped in order; any other frame ends
// the watch. The first frame that ends the watch is reported as nil (plain)
// or as an *Error (runner), a read failure as itself. done is closed when
// the goroutine has returned; it returns once a read fails, so the caller
// ends it by interrupting the connection's reads.
func (c *conn) watchPeer(stopped func(epoch uint64)) (ended <-chan error, done <-chan struct{}) {
	end := make(chan error, 1)
	finished := make(chan struct{})
	c.srv.wg.Add(1)
	go func() {
		defer c.srv.wg.Done()
		defer close(finished)
		end <- c.readPeer(stopped)
	}()
	return end, finished
}

// readPeer reads frames until one ends the watch, and returns why.
func (c *conn) readPeer(stopped func(epoch uint64)) error {
	for {
		b, err := wire.ReadFrame(c.nc, c.max)
		if err != nil || stopped == nil {
			return err
		}
		epoch, bad := parseStopped(b)
		if bad != nil {
			return bad
		}
		stopped(epoch)
	}
}

// parseStopped reads a runner's stopped frame.
func parseStopped(b []byte) (uint64, *Error) {
	var req Request
	if err := wire.Unmarshal(b, &req); err != nil {
		return 0, newError(CodeBadRequest, "malformed frame on a runner's watch: "+err.Error())
	}
	if req.Op != OpStopped {
		return 0, newError(CodeBadRequest, fmt.Sprintf("a runner's watching connection accepts only %q frames, not %q; open another connection",
			OpStopped, clip(req.Op)))
	}
	var body StoppedRequest
	if err := decodeBody(req.Body, &body); err != nil || body.Epoch == 0 {
		return 0, newError(CodeBadRequest, `a stopped frame needs the body {"epoch": N} with N at least 1`)
	}
	return body.Epoch, nil
}
