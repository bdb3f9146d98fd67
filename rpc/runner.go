package rpc

import (
	"fmt"
	"time"

	"github.com/tenurehq/tenure/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
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
	running func(epoch uint64, pgid int) error
	cancel  func()
}

// subscribe starts the subscription a watch request's body asks for: a
// plain one, or a runner's.
func (c *conn) subscribe(body msgpack.RawMessage) (subscription, error) {
	req, err := parseWatchRequest(body)
	if err != nil {
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
	rs, err := b.WatchRunner(c.srv.ctx, RunnerRegistration{Grace: grace, Peer: c.peer})
	if err != nil {
		return subscription{}, err
	}
	stopped := rs.Stopped
	if stopped == nil {
		stopped = func(uint64) {}
	}
	return subscription{events: rs.Events, stopped: stopped, running: rs.Running, cancel: rs.Cancel}, nil
}

// grace checks the runner's grace and returns it.
func (r RunnerRequest) grace() (time.Duration, error) {
	if r.GraceMS == 0 || r.GraceMS > uint64(MaxRunnerGrace/time.Millisecond) {
		return 0, fmt.Errorf("%w: runner grace_ms must be between 1 and %d, not %d",
			ErrInvalidArgument, MaxRunnerGrace/time.Millisecond, r.GraceMS)
	}
	return time.Duration(r.GraceMS) * time.Millisecond, nil
}

// watchPeer reads from the connection during a watch. A plain watcher must
// send nothing: its first frame ends the watch. A runner (sub.stopped not
// nil) may send stopped and running frames, handed to the subscription in
// order; any other frame ends the watch. The first frame that ends the
// watch is reported as nil (plain) or as an *Error (runner), a read failure
// as itself. done is closed when the goroutine has returned; it returns
// once a read fails, so the caller ends it by interrupting the
// connection's reads.
func (c *conn) watchPeer(sub subscription) (ended <-chan error, done <-chan struct{}) {
	end := make(chan error, 1)
	finished := make(chan struct{})
	c.srv.wg.Add(1)
	go func() {
		defer c.srv.wg.Done()
		defer close(finished)
		end <- c.readPeer(sub)
	}()
	return end, finished
}

// readPeer reads frames until one ends the watch, and returns why.
func (c *conn) readPeer(sub subscription) error {
	for {
		b, err := wire.ReadFrame(c.br, c.max)
		if err != nil || sub.stopped == nil {
			return err
		}
		f, bad := parseRunnerFrame(b)
		if bad != nil {
			return bad
		}
		c.deliver(sub, f)
	}
}

// runnerFrame is a runner's stopped or running frame.
type runnerFrame struct {
	op    string
	epoch uint64
	pgid  int
}

// deliver hands a runner's frame to the subscription.
func (c *conn) deliver(sub subscription, f runnerFrame) {
	if f.op == OpStopped {
		sub.stopped(f.epoch)
		return
	}
	if sub.running == nil {
		return
	}
	if err := sub.running(f.epoch, f.pgid); err != nil {
		c.srv.warn(c.log, "rpc: runner's process group refused; the agent will not stop it", "err", err, "pgid", f.pgid, "epoch", f.epoch)
	}
}

// parseRunnerFrame reads a runner's stopped or running frame.
func parseRunnerFrame(b []byte) (runnerFrame, *Error) {
	req, err := parseRequest(b)
	if err != nil {
		return runnerFrame{}, newError(CodeBadRequest, "malformed frame on a runner's watch: "+trimSentinel(err.Error(), ErrBadRequest))
	}
	switch req.Op {
	case OpStopped:
		var body StoppedRequest
		if err := decodeBody(req.Body, body.fields()); err != nil || body.Epoch == 0 {
			return runnerFrame{}, newError(CodeBadRequest, `a stopped frame needs the body {"epoch": N} with N at least 1`)
		}
		return runnerFrame{op: OpStopped, epoch: body.Epoch}, nil
	case OpRunning:
		var body RunningRequest
		if err := decodeBody(req.Body, body.fields()); err != nil || body.Epoch == 0 || body.PGID <= 1 || body.PGID > maxPGID {
			return runnerFrame{}, newError(CodeBadRequest, `a running frame needs the body {"epoch": N, "pgid": P} with N at least 1 and P above 1`)
		}
		return runnerFrame{op: OpRunning, epoch: body.Epoch, pgid: int(body.PGID)}, nil
	}
	return runnerFrame{}, newError(CodeBadRequest, fmt.Sprintf("a runner's watching connection accepts only %q and %q frames, not %q; open another connection",
		OpStopped, OpRunning, clip(req.Op)))
}

// maxPGID bounds a running frame's pgid: Linux PIDs stay below 2^22.
const maxPGID = 1<<31 - 1
