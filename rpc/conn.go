package rpc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/tenurehq/tenure/internal/wire"
)

// errTooLarge reports that a response did not fit in a frame and a
// frame_too_large error was sent in its place.
var errTooLarge = errors.New("rpc: response too large")

// conn is one server-side connection. Its goroutine (serve) does all reads
// and writes, except that during a watch a second goroutine reads to learn
// when the client leaves, and to receive a runner's stopped frames. Only
// serve encodes and writes, so frames and bodies need no lock.
type conn struct {
	srv     *Server
	nc      net.Conn
	br      *bufio.Reader // reads nc, so that a small frame costs one read call, not two
	frames  wire.Encoder  // encodes the frames serve writes
	bodies  wire.Encoder  // encodes the bodies of the responses serve writes
	log     *slog.Logger
	max     int
	greeted bool // the handshake succeeded; errors now travel as Responses
	peer    Peer // the client process, when the kernel says

	counted bool // left Server.ungreeted; guarded by Server.mu

	mu       sync.Mutex // guards stopping and read deadlines
	stopping bool
	readBy   time.Time // the read deadline armRead last set; guarded by mu
	writeBy  time.Time // the write deadline write last set; used by serve only
}

func newConn(s *Server, nc net.Conn, id uint64, peer Peer) *conn {
	return &conn{srv: s, nc: nc, br: bufio.NewReader(nc), log: s.log.With("conn", id, "peer_pid", peer.PID), max: s.cfg.MaxFrame, peer: peer}
}

// serve runs the connection: handshake, then requests until the client
// leaves, sends a bad frame, starts a watch that ends, or the server closes.
func (c *conn) serve() {
	defer c.srv.wg.Done()
	defer c.nc.Close()
	defer c.srv.forget(c) // free the slot before the client can see EOF
	if !c.handshake() {
		return
	}
	for c.next() {
	}
}

// stop interrupts the connection's reads for good; called by Server.Close.
func (c *conn) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopping = true
	_ = c.nc.SetReadDeadline(time.Unix(1, 0))
}

func (c *conn) isStopping() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopping
}

// armRead sets the read deadline d from now (none if d is 0), unless stop
// has already set one in the past. A deadline that still has d to run is
// left alone, and a new one gets a slack beyond d (nextDeadline): a
// connection is closed after between d and d plus the slack without a
// request, and one that asks thousands of times a second moves its timer
// about once per slack, not on every request.
func (c *conn) armRead(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return
	}
	var t time.Time
	if d > 0 {
		var move bool
		if t, move = nextDeadline(c.readBy, d); !move {
			return
		}
	}
	c.readBy = t
	_ = c.nc.SetReadDeadline(t)
}

// nextDeadline returns the deadline for a timeout d counted from now, and
// whether it differs from by, the one set: by stays while it still has d
// to run; a new one is set an eighth of d (at most a second) further, so
// that a connection busy with thousands of requests a second moves its
// timer about once per that slack, not on every request.
func nextDeadline(by time.Time, d time.Duration) (time.Time, bool) {
	now := time.Now()
	if !by.IsZero() && by.Sub(now) >= d {
		return by, false
	}
	return now.Add(d + min(d/8, time.Second)), true
}

// handshake reads the client's Hello and answers it; false ends the
// connection.
func (c *conn) handshake() bool {
	c.armRead(c.srv.cfg.HandshakeTimeout)
	b, err := wire.ReadFrame(c.br, c.max)
	if err != nil {
		c.readFailed(err)
		return false
	}
	h, err := parseHello(b)
	if err != nil {
		c.srv.warn(c.log, "rpc: first frame is not a hello; closing connection", "err", err, "bytes", len(b))
		c.sendError(0, newError(CodeBadRequest, `the first frame must be a hello, {"version": 1, "client": "..."}: `+
			trimSentinel(err.Error(), ErrBadRequest)))
		return false
	}
	if *h.Version != ProtocolVersion {
		c.srv.warn(c.log, "rpc: unsupported protocol version; closing connection",
			"version", *h.Version, "client", clip(h.Client))
		c.sendError(0, newError(CodeUnsupportedVersion,
			fmt.Sprintf("this agent speaks protocol version %d, not %d", ProtocolVersion, *h.Version)))
		return false
	}
	c.log = c.log.With("client", clip(h.Client))
	c.log.Debug("rpc: client connected")
	if c.sendHello(nil) != nil {
		return false
	}
	c.greeted = true
	c.srv.greeted(c)
	return true
}

// next reads and answers one request; false ends the connection.
func (c *conn) next() bool {
	c.armRead(c.srv.cfg.IdleTimeout)
	b, err := wire.ReadFrame(c.br, c.max)
	if err != nil {
		c.readFailed(err)
		return false
	}
	if f := c.srv.cfg.OnRequest; f != nil {
		f()
	}
	req, err := parseRequest(b)
	if err != nil {
		c.srv.warn(c.log, "rpc: malformed request; closing connection", "err", err, "bytes", len(b))
		c.sendError(0, newError(CodeBadRequest, "malformed request: "+trimSentinel(err.Error(), ErrBadRequest)))
		return false
	}
	if req.Op == OpWatch {
		return c.watch(req)
	}
	if req.Op == OpLock {
		return c.lock(req)
	}
	return c.answer(req)
}

// readFailed logs a failed read and tells the client why when it can.
func (c *conn) readFailed(err error) {
	switch {
	case errors.Is(err, io.EOF):
		c.log.Debug("rpc: client closed the connection")
	case errors.Is(err, wire.ErrFrameTooLarge):
		// The body was not read, so the stream is out of step: say why, close.
		c.srv.warn(c.log, "rpc: frame too large; closing connection", "err", err)
		c.sendError(0, newError(CodeFrameTooLarge, fmt.Sprintf("frames are limited to %d bytes", c.max)))
	case c.isStopping():
		// Server.Close interrupted the read.
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.log.Debug("rpc: connection timed out waiting for the client", "greeted", c.greeted)
	case errors.Is(err, io.ErrUnexpectedEOF):
		c.srv.warn(c.log, "rpc: truncated frame; closing connection", "err", err)
		c.sendError(0, newError(CodeBadRequest, "truncated frame"))
	default:
		c.srv.warn(c.log, "rpc: read failed; closing connection", "err", err)
	}
}

// sendHello writes a HelloReply carrying e (nil on success).
func (c *conn) sendHello(e *Error) error {
	b, err := c.frames.Frame(HelloReply{Version: ProtocolVersion, Agent: c.srv.cfg.AgentVersion,
		MaxFrame: uint64(c.max), Error: e})
	if err != nil {
		c.log.Error("rpc: encode hello reply", "err", err)
		return err
	}
	return c.write(b)
}

// sendError reports e to the client: in a HelloReply before the handshake
// has succeeded, in a Response for seq after.
func (c *conn) sendError(seq uint64, e *Error) error {
	if !c.greeted {
		return c.sendHello(e)
	}
	return c.send(Response{Seq: seq, Error: e})
}

// sendBody encodes v as the body of a response to seq; a v that cannot
// be encoded is answered with internal.
func (c *conn) sendBody(seq uint64, v any) error {
	raw, err := c.bodies.Marshal(v)
	if err != nil {
		c.log.Error("rpc: encode response body", "seq", seq, "err", err)
		return c.send(Response{Seq: seq, Error: newError(CodeInternal, "cannot encode the response")})
	}
	return c.send(Response{Seq: seq, Body: raw})
}

// send writes resp. A response too large for a frame is replaced by a
// frame_too_large error for the same seq, and errTooLarge is returned.
func (c *conn) send(resp Response) error {
	b, err := c.frames.Frame(resp)
	if err != nil {
		c.log.Error("rpc: encode response", "seq", resp.Seq, "err", err)
		return err
	}
	if n := len(b) - wire.HeaderSize; n > c.max {
		c.srv.warn(c.log, "rpc: response exceeds the frame limit", "seq", resp.Seq, "bytes", n, "max_frame", c.max)
		msg := fmt.Sprintf("the response of %d bytes exceeds the %d-byte frame limit", n, c.max)
		if err := c.send(Response{Seq: resp.Seq, Error: newError(CodeFrameTooLarge, msg)}); err != nil {
			return err
		}
		return errTooLarge
	}
	return c.write(b)
}

// write writes one frame, header and body as Encoder.Frame returns them,
// in one call within the write timeout.
func (c *conn) write(frame []byte) error {
	// As armRead: a write may block for between WriteTimeout and the
	// slack more.
	if by, move := nextDeadline(c.writeBy, c.srv.cfg.WriteTimeout); move {
		c.writeBy = by
		_ = c.nc.SetWriteDeadline(by)
	}
	_, err := c.nc.Write(frame)
	if err != nil {
		err = fmt.Errorf("rpc: write frame: %w", err)
	}
	switch {
	case err == nil:
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.srv.warn(c.log, "rpc: client is not reading; cutting it off", "write_timeout", c.srv.cfg.WriteTimeout)
	default:
		c.log.Debug("rpc: write failed; closing connection", "err", err)
	}
	return err
}

// clip shortens client-chosen strings before they reach the log.
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
