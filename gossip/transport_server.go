package gossip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"slices"
	"time"

	"github.com/tenurehq/tenure/internal/wire"
)

// acceptLoop accepts connections until the listener closes. Accept errors
// other than closing (such as running out of file descriptors) are retried
// with a growing delay.
func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	var delay time.Duration
	for {
		conn, err := t.ln.Accept()
		if err != nil {
			if t.isClosed() || errors.Is(err, net.ErrClosed) {
				return
			}
			delay = max(5*time.Millisecond, min(2*delay, time.Second))
			t.logger.Warn("gossip: accept failed; retrying", "err", err, "retry_in", delay)
			if !sleepCtx(t.ctx, delay) {
				return
			}
			continue
		}
		delay = 0
		t.accepts.Add(1)
		if in := t.admit(conn); in != nil {
			go t.serveConn(in)
		}
	}
}

// inbound is one accepted connection. proven and evicted are guarded by
// Transport.mu; proven is written only by the connection's own goroutine,
// which may read it without the lock.
type inbound struct {
	conn    net.Conn
	at      time.Time // accepted; the peer's request deadlines count from about then
	remote  string
	proven  bool
	evicted bool // closed to make room for a newer unproven connection
}

// admit registers conn as unproven, first closing the oldest unproven
// connection if MaxUnprovenConns are waiting, or closes conn if the
// transport is closed.
func (t *Transport) admit(conn net.Conn) *inbound {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		conn.Close()
		return nil
	}
	if len(t.unproven) >= t.cfg.MaxUnprovenConns && len(t.unproven) > 0 {
		old := t.unproven[0]
		t.unproven = slices.Delete(t.unproven, 0, 1)
		old.evicted = true
		old.conn.Close()
		t.refused.note("evicted", old.remote, nil)
	}
	in := &inbound{conn: conn, at: time.Now(), remote: conn.RemoteAddr().String()}
	t.unproven = append(t.unproven, in)
	t.inbound[in] = struct{}{}
	t.wg.Add(1)
	return in
}

// prove counts in among the proven connections, unless it was closed to
// make room or MaxConns are already proven.
func (t *Transport) prove(in *inbound) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if in.evicted || t.closed {
		return false
	}
	if t.proven >= t.cfg.MaxConns {
		t.refused.note("over_max_conns", in.remote, nil)
		return false
	}
	t.unproven = slices.DeleteFunc(t.unproven, func(x *inbound) bool { return x == in })
	in.proven = true
	t.proven++
	return true
}

// notProven closes in, which failed to prove itself, and counts it unless
// it was closed to make room (and counted then).
func (t *Transport) notProven(in *inbound, reason string, err error) {
	in.conn.Close()
	t.mu.Lock()
	evicted := in.evicted
	t.mu.Unlock()
	if !evicted && !t.isClosed() {
		t.refused.note(reason, in.remote, err)
	}
}

func (t *Transport) removeInbound(in *inbound) {
	in.conn.Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.inbound, in)
	switch {
	case in.proven:
		t.proven--
	case !in.evicted:
		t.unproven = slices.DeleteFunc(t.unproven, func(x *inbound) bool { return x == in })
	}
}

// serveConn serves requests on one connection, one at a time, until the
// peer closes it, it stays idle for twice IdleTimeout, or a bad frame
// arrives. Until it proves itself (Wrap.Server succeeds, or without Wrap
// its first request is well-formed) it has ProveTimeout.
func (t *Transport) serveConn(in *inbound) {
	defer t.wg.Done()
	defer t.removeInbound(in)
	in.conn.SetDeadline(time.Now().Add(t.cfg.ProveTimeout))
	conn, err := t.wrapServer(in.conn)
	if err != nil {
		t.notProven(in, "handshake", err)
		return
	}
	defer conn.Close()
	if t.cfg.Wrap != nil && !t.prove(in) {
		return
	}
	for t.serveOne(conn, in) {
	}
}

func (t *Transport) wrapServer(raw net.Conn) (net.Conn, error) {
	if t.cfg.Wrap == nil {
		return raw, nil
	}
	return t.cfg.Wrap.Server(raw)
}

// serveOne reads one request, handles it and writes the response. It
// reports whether the connection may carry another request. A connection
// not yet proven keeps the deadline serveConn set, and is proven by a
// well-formed request.
func (t *Transport) serveOne(conn net.Conn, in *inbound) bool {
	if in.proven {
		conn.SetReadDeadline(time.Now().Add(2 * t.cfg.IdleTimeout))
	}
	req, err := t.readRequest(conn)
	if err != nil {
		switch {
		case !in.proven:
			t.notProven(in, "no_request", err)
		case !errors.Is(err, io.EOF) && !t.isClosed():
			t.logger.Debug("gossip: dropping peer connection", "remote", in.remote, "err", err)
		}
		return false
	}
	if !in.proven && !t.prove(in) {
		return false
	}
	var out []byte
	if left := t.callerWaits(req, in); left > 0 {
		out = t.respond(req.Body, in.remote, left)
	} else {
		err := errLateRequest(-left)
		t.stale.note("late", in.remote, err)
		out, _ = t.encodeFrame(response{Err: err.Error()}, "response")
	}
	conn.SetWriteDeadline(time.Now().Add(t.cfg.HandlerTimeout))
	if err := wire.WriteFrame(conn, out); err != nil {
		if !t.isClosed() {
			t.logger.Debug("gossip: writing peer response failed", "remote", in.remote, "err", err)
		}
		return false
	}
	return true
}

// readRequest reads one request frame.
func (t *Transport) readRequest(conn net.Conn) (request, error) {
	var req request
	body, err := wire.ReadFrame(conn, t.cfg.MaxFrame)
	if err != nil {
		return req, err
	}
	if err := wire.Unmarshal(body, &req); err != nil {
		return req, fmt.Errorf("bad request: %w", err)
	}
	return req, nil
}

// callerWaits is how much longer the caller of req waits for its answer,
// by this side's clock (at most HandlerTimeout); zero or less if it has
// given up. A request is stamped with its caller's deadline only by this
// release: an older peer's is given HandlerTimeout.
func (t *Transport) callerWaits(req request, in *inbound) time.Duration {
	if req.Until == 0 {
		return t.cfg.HandlerTimeout
	}
	left := -lateBy(time.Since(in.at), req.Until)
	if left <= 0 {
		return min(left, -time.Millisecond)
	}
	return min(left, t.cfg.HandlerTimeout)
}

// respond runs the handler for at most timeout and encodes its answer,
// replacing one too large for a frame by an error.
func (t *Transport) respond(req []byte, remote string, timeout time.Duration) []byte {
	resp := t.handle(req, remote, timeout)
	out, err := t.encodeFrame(resp, "response")
	if err != nil {
		t.logger.Warn("gossip: peer response not sent", "remote", remote, "err", err)
		out, _ = t.encodeFrame(response{Err: err.Error()}, "response")
	}
	return out
}

// handle calls the handler with a context bounded by timeout, recovering a
// panic.
func (t *Transport) handle(req []byte, remote string, timeout time.Duration) (resp response) {
	ctx, cancel := context.WithTimeout(t.ctx, timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			t.logger.Error("gossip: peer handler panicked", "remote", remote, "panic", p,
				"stack", string(debug.Stack()))
			resp = response{Err: fmt.Sprintf("handler panicked: %v", p)}
		}
	}()
	body, err := t.cfg.Handler(ctx, req)
	if err != nil {
		msg := err.Error()
		if msg == "" {
			msg = "unspecified error"
		}
		return response{Err: msg}
	}
	return response{Body: body}
}
