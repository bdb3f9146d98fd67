package rpc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/vmihailenco/msgpack/v5"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/internal/wire"
)

// maxClientFrame caps the frame size a client accepts, whatever the agent
// announces in its HelloReply.
const maxClientFrame = MaxMaxFrame

// errClientClosed is returned by calls on a closed Client or Watcher.
var errClientClosed = fmt.Errorf("rpc: client is closed: %w", net.ErrClosed)

// Client talks to the local agent. It is safe for concurrent use: calls are
// serialised on one connection. When a call fails on the connection itself
// (including a call abandoned because its ctx ended) the connection is
// dropped and the next call dials again; errors the agent reports leave it
// open.
type Client struct {
	path string

	callMu sync.Mutex // serialises calls; guards seq
	seq    uint64

	mu     sync.Mutex // guards the fields below
	cc     *clientConn
	agent  string
	closed bool
}

// Dial connects to the agent at path and performs the handshake, within
// ctx. When nothing listens at path it returns an error wrapping
// ErrAgentUnreachable. Errors the agent reports in the handshake wrap their
// sentinel (ErrBusy, ErrUnsupportedVersion).
func Dial(ctx context.Context, path string) (*Client, error) {
	cc, err := dial(ctx, path, ProtocolVersion)
	if err != nil {
		return nil, err
	}
	return &Client{path: path, cc: cc, agent: cc.agent}, nil
}

// AgentVersion returns the version string the agent gave in the most recent
// handshake.
func (c *Client) AgentVersion() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.agent
}

// Status returns the agent's Status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	if err := c.call(ctx, OpStatus, &st); err != nil {
		return Status{}, err
	}
	return st, nil
}

// Leader returns the known leader, or an error wrapping ErrNoLeader.
func (c *Client) Leader(ctx context.Context) (LeaderInfo, error) {
	var l LeaderInfo
	if err := c.call(ctx, OpLeader, &l); err != nil {
		return LeaderInfo{}, err
	}
	return l, nil
}

// Members returns the members the agent knows (never nil on success).
func (c *Client) Members(ctx context.Context) ([]Member, error) {
	var ms []Member
	if err := c.call(ctx, OpMembers, &ms); err != nil {
		return nil, err
	}
	if ms == nil {
		ms = []Member{}
	}
	return ms, nil
}

// Resign asks the agent to give up leadership; it fails with an error
// wrapping ErrNotLeader when the agent does not lead.
func (c *Client) Resign(ctx context.Context) error {
	return c.call(ctx, OpResign, nil)
}

// ResignFor asks the agent to give up leadership and stay out of elections
// for hold (the agent's resign hold when zero; at most MaxResignHold,
// rounded down to milliseconds).
func (c *Client) ResignFor(ctx context.Context, hold time.Duration) error {
	if hold < 0 {
		return fmt.Errorf("rpc: resign: %w: negative hold %v", ErrInvalidArgument, hold)
	}
	return c.callWith(ctx, OpResign, ResignRequest{HoldMS: uint64(hold.Milliseconds())}, nil)
}

// Drain makes the agent's node ineligible to lead, now and after restarts;
// a leader resigns. Drain(ctx, false) makes it eligible again.
func (c *Client) Drain(ctx context.Context, drained bool) error {
	return c.callWith(ctx, OpDrain, DrainRequest{Off: !drained}, nil)
}

// Transfer asks the leader, through this node, to hand its term to the
// live eligible member name, which then leads instead of the node the
// election would pick.
func (c *Client) Transfer(ctx context.Context, name string) error {
	return c.callWith(ctx, OpTransfer, TransferRequest{Name: name}, nil)
}

// Check asks whether epoch is the live term on this node: CheckResult.Current
// is true only when this node leads that term with a valid lease. A leader
// verifies with it before acting; a resource should still check the token.
func (c *Client) Check(ctx context.Context, epoch uint64) (CheckResult, error) {
	var res CheckResult
	err := c.callWith(ctx, OpCheck, CheckRequest{Epoch: epoch}, &res)
	return res, err
}

// ForceLeave asks the leader, through this node, to remove the voter name
// from the roster; for voters that will not come back.
func (c *Client) ForceLeave(ctx context.Context, name string) error {
	return c.callWith(ctx, OpForceLeave, ForceLeaveRequest{Name: name}, nil)
}

// Keys runs a cluster key action (KeysList, KeysInstall, KeysUse,
// KeysRemove) on every member, with key in base64 ("" for list).
func (c *Client) Keys(ctx context.Context, action, key string) (KeyringInfo, error) {
	var res KeyringInfo
	err := c.callWith(ctx, OpKeys, KeysRequest{Action: action, Key: key}, &res)
	return res, err
}

// Close closes the connection; calls in flight fail. It is idempotent.
// Watchers opened by the Client are independent and need their own Close.
func (c *Client) Close() error {
	c.mu.Lock()
	cc := c.cc
	c.cc, c.closed = nil, true
	c.mu.Unlock()
	if cc != nil {
		return cc.nc.Close()
	}
	return nil
}

// call sends op with no body and decodes the response body into out (unless
// out is nil).
func (c *Client) call(ctx context.Context, op string, out any) error {
	return c.callWith(ctx, op, nil, out)
}

// callWith sends op with the request body in (nil for none) and decodes the
// response body into out (nil to ignore it).
func (c *Client) callWith(ctx context.Context, op string, in, out any) error {
	var body msgpack.RawMessage
	if in != nil {
		b, err := wire.Marshal(in)
		if err != nil {
			return fmt.Errorf("rpc: %s: %w", op, err)
		}
		body = b
	}
	c.callMu.Lock()
	defer c.callMu.Unlock()
	cc, err := c.conn(ctx)
	if err != nil {
		return err
	}
	c.seq++
	resp, err := cc.roundTrip(ctx, Request{Seq: c.seq, Op: op, Body: body})
	if cc.broken {
		c.drop(cc)
	}
	if err != nil {
		return callError(op, err)
	}
	if resp.Error != nil {
		return resp.Error
	}
	if out == nil {
		return nil
	}
	if err := cc.dec.Unmarshal(resp.Body, out); err != nil {
		return fmt.Errorf("rpc: %s: bad response body: %w", op, err)
	}
	return nil
}

// conn returns the open connection, dialling a new one if needed.
func (c *Client) conn(ctx context.Context) (*clientConn, error) {
	c.mu.Lock()
	cc, closed := c.cc, c.closed
	c.mu.Unlock()
	if closed {
		return nil, errClientClosed
	}
	if cc != nil {
		return cc, nil
	}
	cc, err := dial(ctx, c.path, ProtocolVersion)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cc.nc.Close()
		return nil, errClientClosed
	}
	c.cc, c.agent = cc, cc.agent
	return cc, nil
}

// drop closes cc and forgets it, unless Close got there first.
func (c *Client) drop(cc *clientConn) {
	c.mu.Lock()
	if c.cc == cc {
		c.cc = nil
	}
	c.mu.Unlock()
	cc.nc.Close()
}

// callError words a failure of the connection during op.
func callError(op string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("rpc: %s: the agent closed the connection: %w", op, err)
	}
	return fmt.Errorf("rpc: %s: %w", op, err)
}

// clientConn is one client-side connection after a successful handshake.
type clientConn struct {
	nc     net.Conn
	br     *bufio.Reader // reads nc, so that a small frame costs one read call, not two
	enc    wire.Encoder  // encodes the frames writeMsg writes; used by one writer at a time
	dec    wire.Decoder  // decodes the frames readMsg reads and their bodies; used by one reader at a time
	max    int
	agent  string
	broken bool // out of step or interrupted: must not be used again
	// deadline is the one last set on nc; a call with the same (none, for
	// a context that cannot end) does not set it again.
	deadline time.Time
}

// dial connects to path and performs the handshake with version.
func dial(ctx context.Context, path string, version uint64) (*clientConn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("rpc: connect to %s: %w", path, ctx.Err())
		}
		return nil, &unreachableError{path: path, err: err}
	}
	cc := &clientConn{nc: nc, br: bufio.NewReader(nc), max: wire.DefaultMaxFrame}
	if err := cc.handshake(ctx, path, version); err != nil {
		nc.Close()
		return nil, err
	}
	return cc, nil
}

// handshake sends a Hello and reads the HelloReply.
func (cc *clientConn) handshake(ctx context.Context, path string, version uint64) error {
	var reply HelloReply
	err := cc.within(ctx, func() error {
		werr := cc.writeMsg(Hello{Version: &version, Client: clientName()})
		// Read even if the write failed: a busy agent may have answered
		// and closed before reading the Hello.
		if err := cc.readMsg(&reply); err != nil {
			return errors.Join(err, werr)
		}
		return nil
	})
	switch {
	case err != nil:
		return fmt.Errorf("rpc: handshake with the agent at %s: %w", path, err)
	case reply.Error != nil:
		return reply.Error
	case reply.Version != ProtocolVersion:
		return fmt.Errorf("%w: the agent speaks version %d", ErrUnsupportedVersion, reply.Version)
	}
	cc.agent = reply.Agent
	cc.max = int(min(max(reply.MaxFrame, wire.DefaultMaxFrame), maxClientFrame))
	return nil
}

// clientName names this program in the Hello, for the agent's log.
func clientName() string {
	if len(os.Args) == 0 {
		return "go"
	}
	return "go:" + filepath.Base(os.Args[0])
}

// roundTrip sends req and reads its response.
func (cc *clientConn) roundTrip(ctx context.Context, req Request) (Response, error) {
	var resp Response
	err := cc.within(ctx, func() error {
		if err := cc.writeMsg(req); err != nil {
			return err
		}
		return cc.readMsg(&resp)
	})
	switch {
	case err != nil:
		return resp, err
	case resp.Error != nil && !keepsOpen(resp.Error.Code):
		cc.broken = true // the agent closes the connection after this error
		if resp.Seq == 0 || resp.Seq == req.Seq {
			return resp, resp.Error
		}
	case resp.Seq == req.Seq:
		return resp, nil
	}
	cc.broken = true
	return resp, fmt.Errorf("rpc: response seq %d does not match request seq %d", resp.Seq, req.Seq)
}

// within runs f with the connection's deadline set from ctx, and interrupts
// it when ctx ends. A failure, or an interruption that may yet land, marks
// the connection broken.
func (cc *clientConn) within(ctx context.Context, f func() error) error {
	deadline, hasDeadline := ctx.Deadline()
	if !deadline.Equal(cc.deadline) {
		_ = cc.nc.SetDeadline(deadline)
		cc.deadline = deadline
	}
	stop := neverStopped
	if ctx.Done() != nil { // a ctx that can end (Background cannot)
		stop = context.AfterFunc(ctx, func() { _ = cc.nc.SetDeadline(time.Unix(1, 0)) })
	}
	err := f()
	if !stop() || err != nil {
		cc.broken = true
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case hasDeadline && errors.Is(err, os.ErrDeadlineExceeded):
		return context.DeadlineExceeded
	}
	return err
}

// neverStopped stands for the stop function of a context.AfterFunc whose
// ctx can never end: it reports that the function was stopped before it ran.
func neverStopped() bool { return true }

// writeMsg writes v as one frame, in one call.
func (cc *clientConn) writeMsg(v any) error {
	frame, err := cc.enc.Frame(v)
	if err != nil {
		return err
	}
	if _, err := cc.nc.Write(frame); err != nil {
		return fmt.Errorf("rpc: write frame: %w", err)
	}
	return nil
}

func (cc *clientConn) readMsg(v any) error {
	b, err := wire.ReadFrame(cc.br, cc.max)
	switch {
	case errors.Is(err, wire.ErrFrameTooLarge):
		return fmt.Errorf("%w: %w", ErrFrameTooLarge, err)
	case err != nil:
		return err
	}
	if err := cc.dec.Unmarshal(b, v); err != nil {
		return fmt.Errorf("rpc: malformed frame from the agent: %w", err)
	}
	return nil
}

// unreachableError reports that nothing answers at a socket path.
type unreachableError struct {
	path string
	err  error
}

func (e *unreachableError) Error() string {
	cause := e.err.Error()
	var se *os.SyscallError
	if errors.As(e.err, &se) {
		cause = se.Error() // "connect: no such file or directory"
	}
	if errors.Is(e.err, fs.ErrNotExist) || errors.Is(e.err, syscall.ECONNREFUSED) {
		return fmt.Sprintf("rpc: no tenure agent is listening on %s: %s", e.path, cause)
	}
	return fmt.Sprintf("rpc: cannot reach the tenure agent at %s: %s", e.path, cause)
}

func (e *unreachableError) Unwrap() []error { return []error{ErrAgentUnreachable, e.err} }
