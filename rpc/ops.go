package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tenurehq/tenure/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
)

// unaryHandler answers one request-response op. body is the request's body
// as msgpack (nil when absent); decode it with decodeBody or decodeOptional,
// which refuse a body of the wrong shape or types with ErrBadRequest (the
// connection closes); refuse values the op does not allow with
// ErrInvalidArgument (the connection stays open). The result is encoded as
// the response body.
type unaryHandler func(ctx context.Context, b Backend, body msgpack.RawMessage) (any, error)

// unary returns the handler for a request-response op, or nil. To add an op:
// an Op constant in rpc.go, a case here, a small handler below, a Client
// method, and its section in docs/PROTOCOL.md.
func unary(op string) unaryHandler {
	switch op {
	case OpStatus:
		return opStatus
	case OpLeader:
		return opLeader
	case OpMembers:
		return opMembers
	case OpResign:
		return opResign
	case OpCheck:
		return opCheck
	case OpForceLeave:
		return opForceLeave
	case OpKeys:
		return opKeys
	case OpDrain:
		return opDrain
	case OpTransfer:
		return opTransfer
	case OpLocks:
		return opLocks
	case OpStopped, OpRunning:
		return opStopped
	}
	return nil
}

// fromMemory reports whether op is answered from the agent's memory at
// once (the queries applications repeat, often thousands of times a
// second): it gets the server's context as it is, without a context of its
// own per request, whose registration with the server's context every
// connection's request contended for.
func fromMemory(op string) bool {
	return op == OpLeader || op == OpStatus || op == OpMembers
}

// opStopped refuses a stopped or running frame outside a runner's watch:
// a frame where the protocol allows none.
func opStopped(context.Context, Backend, msgpack.RawMessage) (any, error) {
	return nil, fmt.Errorf("%w: stopped and running are sent only on a runner's watching connection", ErrBadRequest)
}

func opCheck(ctx context.Context, b Backend, body msgpack.RawMessage) (any, error) {
	var req CheckRequest
	if err := decodeBody(body, req.fields()); err != nil {
		return nil, err
	}
	return b.Check(ctx, req.Epoch)
}

func opForceLeave(ctx context.Context, b Backend, body msgpack.RawMessage) (any, error) {
	var req ForceLeaveRequest
	if err := decodeBody(body, req.fields()); err != nil {
		return nil, err
	}
	if req.Name == "" {
		return nil, fmt.Errorf("%w: force-leave needs a node name", ErrInvalidArgument)
	}
	return nil, b.ForceLeave(ctx, req.Name)
}

func opKeys(ctx context.Context, b Backend, body msgpack.RawMessage) (any, error) {
	var req KeysRequest
	if err := decodeBody(body, req.fields()); err != nil {
		return nil, err
	}
	switch req.Action {
	case KeysList:
	case KeysInstall, KeysUse, KeysRemove:
		if req.Key == "" {
			return nil, fmt.Errorf("%w: keys %s needs a key", ErrInvalidArgument, req.Action)
		}
	default:
		return nil, fmt.Errorf("%w: unknown keys action %q (list, install, use, remove)", ErrInvalidArgument, clip(req.Action))
	}
	return b.Keys(ctx, req)
}

func opStatus(ctx context.Context, b Backend, _ msgpack.RawMessage) (any, error) {
	return b.Status(ctx)
}

func opLeader(ctx context.Context, b Backend, _ msgpack.RawMessage) (any, error) {
	return b.Leader(ctx)
}

func opMembers(ctx context.Context, b Backend, _ msgpack.RawMessage) (any, error) {
	ms, err := b.Members(ctx)
	if ms == nil {
		ms = []Member{} // an empty array on the wire, never nil
	}
	return ms, err
}

func opResign(ctx context.Context, b Backend, body msgpack.RawMessage) (any, error) {
	var req ResignRequest
	if err := decodeOptional(body, req.fields()); err != nil {
		return nil, err
	}
	if req.HoldMS > uint64(MaxResignHold/time.Millisecond) {
		return nil, fmt.Errorf("%w: resign hold of %d ms exceeds %v", ErrInvalidArgument, req.HoldMS, MaxResignHold)
	}
	return nil, b.Resign(ctx, req)
}

func opDrain(ctx context.Context, b Backend, body msgpack.RawMessage) (any, error) {
	var req DrainRequest
	if err := decodeBody(body, req.fields()); err != nil {
		return nil, err
	}
	return nil, b.Drain(ctx, req)
}

func opTransfer(ctx context.Context, b Backend, body msgpack.RawMessage) (any, error) {
	var req TransferRequest
	if err := decodeBody(body, req.fields()); err != nil {
		return nil, err
	}
	if req.Name == "" {
		return nil, fmt.Errorf("%w: transfer needs a node name", ErrInvalidArgument)
	}
	return nil, b.Transfer(ctx, req.Name)
}

// answer runs a request-response op and writes its response; false ends
// the connection: after a write that failed, and after an error whose code
// closes it (keepsOpen), such as frame_too_large for a response that does
// not fit.
func (c *conn) answer(req Request) bool {
	h := unary(req.Op)
	if h == nil {
		c.srv.warn(c.log, "rpc: unknown op", "op", clip(req.Op), "seq", req.Seq)
		return c.fail(req.Seq, newError(CodeUnknownOp, fmt.Sprintf("unknown op %q", clip(req.Op))))
	}
	ctx := c.srv.ctx // ends when the server closes
	if !fromMemory(req.Op) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
	}
	body, err := h(ctx, c.srv.cfg.Backend, req.Body)
	if err != nil {
		e := c.backendError(req.Op, err)
		if e.Code == CodeBadRequest {
			c.srv.warn(c.log, "rpc: bad request; closing connection", "op", clip(req.Op), "seq", req.Seq, "err", e.Message)
		}
		return c.fail(req.Seq, e)
	}
	return c.sendBody(req.Seq, body) == nil
}

// fail sends e for seq; false when the connection must close: the write
// failed, or e's code closes it.
func (c *conn) fail(seq uint64, e *Error) bool {
	return c.sendError(seq, e) == nil && keepsOpen(e.Code)
}

// backendError converts an error from the Backend for the wire; errors that
// wrap no sentinel are logged and sent as a short internal error.
func (c *conn) backendError(op string, err error) *Error {
	if e, ok := wireError(err); ok {
		return e
	}
	if c.srv.ctx.Err() != nil {
		return newError(CodeShuttingDown, "the agent is stopping")
	}
	c.log.Error("rpc: backend failed", "op", op, "err", err)
	return newError(CodeInternal, op+" failed; the agent's log has the details")
}

// watch streams events for the request until the client leaves, the
// subscription ends or the server closes. Once the stream has started it
// owns the rest of the connection's life: the connection accepts no other
// request (a runner's stopped and running frames aside, see runner.go),
// and watch returns false. A watch refused before it started is answered
// like any request: watch returns whether the connection stays open.
func (c *conn) watch(req Request) bool {
	c.armRead(0) // watches are exempt from the idle timeout
	sub, err := c.subscribe(req.Body)
	if err != nil {
		return c.fail(req.Seq, c.backendError(OpWatch, err))
	}
	defer sub.cancel()
	c.log.Debug("rpc: watch started", "seq", req.Seq, "runner", sub.stopped != nil)
	peer, reader := c.watchPeer(sub)
	if end := c.stream(req.Seq, sub.events, peer); end != nil {
		_ = c.send(Response{Seq: req.Seq, Error: end})
	}
	// The reader must be gone before cancel: stopped is never called after.
	_ = c.nc.SetReadDeadline(time.Unix(1, 0))
	<-reader
	c.log.Debug("rpc: watch ended", "seq", req.Seq)
	return false
}

// stream forwards events as stream frames. It returns the error for the
// final frame, or nil when no final frame can or should be sent.
func (c *conn) stream(seq uint64, events <-chan Event, peer <-chan error) *Error {
	for {
		select {
		case ev, ok := <-events:
			if c.srv.ctx.Err() != nil {
				return newError(CodeShuttingDown, "the agent is stopping")
			}
			if !ok {
				// The backend ended a running subscription: this watcher fell
				// too far behind and was dropped so it cannot slow the agent.
				c.srv.warn(c.log, "rpc: watcher too slow; its stream was ended")
				return newError(CodeTooSlow, "this watcher fell too far behind the agent's events; reconnect and read faster")
			}
			raw, err := c.bodies.Marshal(ev)
			if err != nil {
				c.log.Error("rpc: encode event; ending the watch", "seq", seq, "err", err)
				return nil
			}
			if err := c.send(Response{Seq: seq, Body: raw, Stream: true}); err != nil {
				return nil // cut off, or a frame_too_large final frame was sent
			}
		case err := <-peer:
			return c.peerEnded(err)
		case <-c.srv.ctx.Done():
			return newError(CodeShuttingDown, "the agent is stopping")
		}
	}
}

// peerEnded decides how a watch ends once the client has spoken or left.
func (c *conn) peerEnded(err error) *Error {
	var bad *Error
	switch {
	case c.srv.ctx.Err() != nil:
		return newError(CodeShuttingDown, "the agent is stopping")
	case errors.As(err, &bad):
		c.srv.warn(c.log, "rpc: runner sent a bad frame; ending its watch", "err", err)
		return bad
	case errors.Is(err, wire.ErrFrameTooLarge):
		c.srv.warn(c.log, "rpc: frame too large during a watch; ending it", "err", err)
		return newError(CodeFrameTooLarge, fmt.Sprintf("frames are limited to %d bytes", c.max))
	case errors.Is(err, io.ErrUnexpectedEOF):
		c.srv.warn(c.log, "rpc: truncated frame during a watch; ending it", "err", err)
		return newError(CodeBadRequest, "truncated frame")
	case err == nil:
		c.srv.warn(c.log, "rpc: client sent a frame during a watch; ending it")
		return newError(CodeBadRequest, "a watching connection accepts no requests; open another connection")
	}
	c.log.Debug("rpc: client left the watch", "err", err)
	return nil
}
