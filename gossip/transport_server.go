package gossip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
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
		if t.addInbound(conn) {
			go t.serveConn(conn)
		}
	}
}

// addInbound registers conn for Close and the MaxConns limit, or closes it.
func (t *Transport) addInbound(conn net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		conn.Close()
		return false
	}
	if len(t.inbound) >= t.cfg.MaxConns {
		t.logger.Warn("gossip: too many peer connections; refusing one",
			"remote", conn.RemoteAddr().String(), "limit", t.cfg.MaxConns)
		conn.Close()
		return false
	}
	t.inbound[conn] = struct{}{}
	t.wg.Add(1)
	return true
}

func (t *Transport) removeInbound(conn net.Conn) {
	conn.Close()
	t.mu.Lock()
	delete(t.inbound, conn)
	t.mu.Unlock()
}

// serveConn serves requests on one connection, one at a time, until the
// peer closes it, it stays idle for twice IdleTimeout, or a bad frame
// arrives.
func (t *Transport) serveConn(raw net.Conn) {
	defer t.wg.Done()
	defer t.removeInbound(raw)
	remote := raw.RemoteAddr().String()
	conn, err := t.wrapServer(raw)
	if err != nil {
		t.logger.Debug("gossip: peer connection handshake failed", "remote", remote, "err", err)
		return
	}
	defer conn.Close()
	for t.serveOne(conn, remote) {
	}
}

func (t *Transport) wrapServer(raw net.Conn) (net.Conn, error) {
	if t.cfg.Wrap == nil {
		return raw, nil
	}
	raw.SetDeadline(time.Now().Add(t.cfg.HandlerTimeout))
	return t.cfg.Wrap.Server(raw)
}

// serveOne reads one request, handles it and writes the response. It
// reports whether the connection may carry another request.
func (t *Transport) serveOne(conn net.Conn, remote string) bool {
	conn.SetReadDeadline(time.Now().Add(2 * t.cfg.IdleTimeout))
	body, err := wire.ReadFrame(conn, t.cfg.MaxFrame)
	if err != nil {
		if !errors.Is(err, io.EOF) && !t.isClosed() {
			t.logger.Debug("gossip: dropping peer connection: bad frame", "remote", remote, "err", err)
		}
		return false
	}
	var req request
	if err := wire.Unmarshal(body, &req); err != nil {
		t.logger.Debug("gossip: dropping peer connection: bad request", "remote", remote, "err", err)
		return false
	}
	out := t.respond(req.Body, remote)
	conn.SetWriteDeadline(time.Now().Add(t.cfg.HandlerTimeout))
	if err := wire.WriteFrame(conn, out); err != nil {
		if !t.isClosed() {
			t.logger.Debug("gossip: writing peer response failed", "remote", remote, "err", err)
		}
		return false
	}
	return true
}

// respond runs the handler and encodes its answer, replacing one too large
// for a frame by an error.
func (t *Transport) respond(req []byte, remote string) []byte {
	resp := t.handle(req, remote)
	out, err := t.encodeFrame(resp, "response")
	if err != nil {
		t.logger.Warn("gossip: peer response not sent", "remote", remote, "err", err)
		out, _ = t.encodeFrame(response{Err: err.Error()}, "response")
	}
	return out
}

// handle calls the handler with a bounded context, recovering a panic.
func (t *Transport) handle(req []byte, remote string) (resp response) {
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.HandlerTimeout)
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
