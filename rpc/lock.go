package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/tenurehq/tenure/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
)

// Named leases over the socket (docs/PROTOCOL.md section 6.12): a lock
// request turns its connection into a lock session. The agent streams
// LockEvents (queued, acquired, renewed) while the client renews with
// lock-renew frames at least once per TTL, and ends the session with a
// final frame: a LockEvent "released" after the client's release frame, or
// an error (timeout, lost, invalid_argument, no_leader). Closing the
// connection releases the lease, or leaves the queue.

// Lock event states (LockEvent.State).
const (
	LockQueued   = "queued"
	LockAcquired = "acquired"
	LockRenewed  = "renewed"
	LockReleased = "released"
	LockRevoked  = "revoked"
)

// LockRequest is the body of a lock request.
type LockRequest struct {
	// Name is the lease's name: 1 to 128 bytes of letters, digits and
	// . _ : / @ + = -.
	Name string `msgpack:"name" json:"name"`
	// TTLMS is the lease's TTL in milliseconds; 0 asks for the agent's
	// default (twice its lease TTL). At least 1000, at most three lease
	// TTLs.
	TTLMS uint64 `msgpack:"ttl_ms" json:"ttl_ms"`
	// WaitMS bounds the wait in milliseconds: 0 tries once, negative (or
	// absent) waits as long as it takes.
	WaitMS int64 `msgpack:"wait_ms" json:"wait_ms"`
	// Task asks for a singleton task rather than a lock: the leader places
	// each task on one of the hosts that ask for it, spreading tasks over
	// hosts, instead of granting in arrival order.
	Task bool `msgpack:"task" json:"task"`
	// Group makes the lease a partition of the group: Name must be
	// GROUP/N. The leader divides a group's partitions among the nodes
	// asking for them, and asks a node holding more than its share to
	// give some back (a revoked event).
	Group string `msgpack:"group,omitempty" json:"group,omitempty"`
}

func (r *LockRequest) fields() []field {
	return []field{{key: "name", dst: &r.Name, required: true}, {key: "ttl_ms", dst: &r.TTLMS},
		{key: "wait_ms", dst: &r.WaitMS}, {key: "task", dst: &r.Task}, {key: "group", dst: &r.Group}}
}

// LockEvent is one frame of a lock session.
type LockEvent struct {
	// State is LockQueued, LockAcquired, LockRenewed or LockReleased.
	State string `msgpack:"state" json:"state"`
	// Name is the lease's name.
	Name string `msgpack:"name" json:"name"`
	// Token is the lease's fencing token (acquired, renewed): it grows with
	// every grant of the name, across leader changes; compare it only with
	// tokens of the same name.
	Token uint64 `msgpack:"token" json:"token"`
	// RemainingMS is how long the lease still runs on the agent's clock,
	// counted from when the agent sent this frame (acquired, renewed).
	RemainingMS int64 `msgpack:"remaining_ms" json:"remaining_ms"`
	// TTLMS is the lease's TTL.
	TTLMS int64 `msgpack:"ttl_ms" json:"ttl_ms"`
	// Position is the place in the queue (queued; 1 is next).
	Position int64 `msgpack:"position" json:"position"`
	// Message says more, for people.
	Message string `msgpack:"message,omitempty" json:"message,omitempty"`
}

// LockInfo describes one name in the leader's table (OpLocks).
type LockInfo struct {
	// Name is the lease's name.
	Name string `msgpack:"name" json:"name"`
	// Kind is "lock" or "task".
	Kind string `msgpack:"kind" json:"kind"`
	// Holder is the holding node's name, "" when nobody holds it (only
	// waiters).
	Holder string `msgpack:"holder" json:"holder"`
	// Token is the holder's fencing token.
	Token uint64 `msgpack:"token" json:"token"`
	// RemainingMS is how long the holder's lease runs, on the leader's
	// clock.
	RemainingMS int64 `msgpack:"remaining_ms" json:"remaining_ms"`
	// Waiters are the waiting nodes, in queue order.
	Waiters []string `msgpack:"waiters" json:"waiters"`
	// Group is the group of a partition (Kind "partition").
	Group string `msgpack:"group,omitempty" json:"group,omitempty"`
	// Revoking says the leader asked the holder to give the partition
	// back.
	Revoking bool `msgpack:"revoking,omitempty" json:"revoking,omitempty"`
}

// LockSession is what a Backend returns for a lock request. The server
// reads Events and sends each as a stream frame until the channel closes;
// End (set before the close) then says how the session ended: nil after a
// release, else an error wrapping ErrTimeout, ErrLost, ErrInvalidArgument
// or ErrNoLeader. Renew answers the client's lock-renew, Release its
// release frame (the lease is released at once); Close ends the session
// when the connection ends without a release: a held lease is then left
// to run out, since the client's work may still be running. None of them
// may block; the server calls Close last, always.
type LockSession struct {
	Events  <-chan LockEvent
	End     func() error
	Renew   func()
	Release func()
	Close   func()
}

// lock serves a lock session on the connection.
func (c *conn) lock(req Request) bool {
	c.armRead(0) // a session is exempt from the idle timeout; renewals keep it alive
	lr := LockRequest{WaitMS: -1}
	if err := decodeBody(req.Body, lr.fields()); err != nil {
		return c.fail(req.Seq, c.backendError(OpLock, err))
	}
	sess, err := c.srv.cfg.Backend.Lock(c.srv.ctx, lr)
	if err != nil {
		return c.fail(req.Seq, c.backendError(OpLock, err))
	}
	defer sess.Close()
	peer := make(chan error, 1)
	reader := make(chan struct{})
	c.srv.wg.Add(1)
	go func() {
		defer c.srv.wg.Done()
		defer close(reader)
		peer <- c.readLockFrames(sess)
	}()
	end := c.lockStream(req.Seq, sess, peer)
	if end != nil {
		_ = c.send(Response{Seq: req.Seq, Error: end})
	}
	_ = c.nc.SetReadDeadline(time.Unix(1, 0))
	<-reader
	return false
}

// lockStream forwards a session's events and returns the final frame's
// error; a nil return after a release has sent the released frame.
func (c *conn) lockStream(seq uint64, sess LockSession, peer <-chan error) *Error {
	for {
		select {
		case ev, ok := <-sess.Events:
			if !ok {
				if err := sess.End(); err != nil {
					return c.backendError(OpLock, err)
				}
				_ = c.sendBody(seq, LockEvent{State: LockReleased})
				return nil
			}
			raw, err := wire.Marshal(ev)
			if err != nil {
				c.log.Error("rpc: encode lock event", "err", err)
				return newError(CodeInternal, "cannot encode a lock event")
			}
			if err := c.send(Response{Seq: seq, Body: raw, Stream: true}); err != nil {
				return nil
			}
		case err := <-peer:
			if errors.Is(err, errLockReleased) {
				peer = nil
				continue // the events channel closes next
			}
			return c.peerEnded(err)
		case <-c.srv.ctx.Done():
			return newError(CodeShuttingDown, "the agent is stopping")
		}
	}
}

// errLockReleased ends the frame reader after a release frame.
var errLockReleased = errors.New("rpc: lock released")

// readLockFrames reads a lock session's client frames: lock-renew, and
// release, which ends the reading.
func (c *conn) readLockFrames(sess LockSession) error {
	for {
		b, err := wire.ReadFrame(c.br, c.max)
		if err != nil {
			return err
		}
		req, err := parseRequest(b)
		if err != nil {
			return newError(CodeBadRequest, "malformed request: "+trimSentinel(err.Error(), ErrBadRequest))
		}
		switch req.Op {
		case OpLockRenew:
			sess.Renew()
		case OpRelease:
			sess.Release()
			return errLockReleased
		default:
			return newError(CodeBadRequest, fmt.Sprintf("a lock session accepts only %q and %q frames, not %q", OpLockRenew, OpRelease, req.Op))
		}
	}
}

func opLocks(ctx context.Context, b Backend, _ msgpack.RawMessage) (any, error) {
	return b.Locks(ctx)
}

// LockOptions tune Client.LockWith.
type LockOptions struct {
	// TTL is the lease's TTL; 0 asks for the agent's default.
	TTL time.Duration
	// Wait bounds the wait for the lease: 0 tries once, negative waits
	// until ctx ends.
	Wait time.Duration
	// Task asks for a singleton task (LockRequest.Task).
	Task bool
	// Group makes the lease a partition of the group (LockRequest.Group).
	Group string
}

// Lock is a named lease held through the local agent. It renews itself in
// the background until Unlock, or until it is lost: Lost's channel closes
// then, and the holder must stop acting on it. Token is the fencing token
// to hand to resources.
type Lock struct {
	name    string
	token   uint64
	ttl     time.Duration
	cc      *clientConn
	lost    chan struct{}
	revoked chan struct{}
	final   chan error // the session's final frame (nil after a release)
	done    chan struct{}
	closed  chan struct{}
	// deadline holds the lease's end as this process estimates it (a
	// channel of one, so reading and updating it need no lock).
	deadline chan time.Time
	writeMu  sync.Mutex // serialises the renewals and the release
	err      error      // why it was lost; written before lost closes
}

// Lock waits, until ctx ends, for the named lease with the agent's default
// TTL; see LockWith.
func (c *Client) Lock(ctx context.Context, name string) (*Lock, error) {
	return c.LockWith(ctx, name, LockOptions{Wait: -1})
}

// TryLock tries once to take the named lease; it fails with an error
// wrapping ErrTimeout when the name is held.
func (c *Client) TryLock(ctx context.Context, name string) (*Lock, error) {
	return c.LockWith(ctx, name, LockOptions{})
}

// LockWith opens a lock session on a connection of its own and waits
// until the lease is granted, o.Wait runs out (an error wrapping
// ErrTimeout), or ctx ends (the wait is abandoned and the agent drops the
// request). Errors wrap ErrInvalidArgument for a bad name or TTL, or a
// cluster in available mode.
func (c *Client) LockWith(ctx context.Context, name string, o LockOptions) (*Lock, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, errClientClosed
	}
	req := LockRequest{Name: name, TTLMS: uint64(o.TTL.Milliseconds()), WaitMS: o.Wait.Milliseconds(), Task: o.Task, Group: o.Group}
	if o.Wait < 0 {
		req.WaitMS = -1
	}
	body, err := wire.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("rpc: lock: %w", err)
	}
	cc, err := dial(ctx, c.path, ProtocolVersion)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { cc.nc.Close() })
	defer stop()
	if err := cc.writeMsg(Request{Seq: 1, Op: OpLock, Body: body}); err != nil {
		cc.nc.Close()
		return nil, ctxOr(ctx, callError(OpLock, err))
	}
	_ = cc.nc.SetDeadline(time.Time{})
	for {
		ev, final, err := readLockFrame(cc)
		if err != nil {
			cc.nc.Close()
			return nil, ctxOr(ctx, err)
		}
		if final {
			cc.nc.Close()
			return nil, fmt.Errorf("rpc: lock %q: the agent ended the session", name)
		}
		if ev.State != LockAcquired {
			continue
		}
		if !stop() {
			cc.nc.Close()
			return nil, ctx.Err()
		}
		l := &Lock{name: name, token: ev.Token, ttl: time.Duration(ev.TTLMS) * time.Millisecond, cc: cc,
			lost: make(chan struct{}), revoked: make(chan struct{}), final: make(chan error, 1), done: make(chan struct{}), closed: make(chan struct{}),
			deadline: make(chan time.Time, 1)}
		l.deadline <- time.Now().Add(time.Duration(ev.RemainingMS) * time.Millisecond)
		go l.run()
		return l, nil
	}
}

// ctxOr returns ctx's error when it ended, else err.
func ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("rpc: lock: %w", ctx.Err())
	}
	return err
}

// readLockFrame reads one frame of a lock session.
func readLockFrame(cc *clientConn) (LockEvent, bool, error) {
	var resp Response
	if err := cc.readMsg(&resp); err != nil {
		return LockEvent{}, false, callError(OpLock, err)
	}
	if resp.Error != nil {
		return LockEvent{}, true, resp.Error
	}
	var ev LockEvent
	if err := wire.Unmarshal(resp.Body, &ev); err != nil {
		return LockEvent{}, false, fmt.Errorf("rpc: lock: bad event: %w", err)
	}
	return ev, !resp.Stream, nil
}

// Name returns the lease's name.
func (l *Lock) Name() string { return l.name }

// Token returns the lease's fencing token.
func (l *Lock) Token() uint64 { return l.token }

// Lost returns a channel that closes when the lease is lost: the agent
// could not renew it in time, or its connection to the agent failed.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Revoked returns a channel that closes when the leader asks for a
// partition back (LockOptions.Group): stop using it, then Unlock. The
// lease stays renewed meanwhile.
func (l *Lock) Revoked() <-chan struct{} { return l.revoked }

// Err says why the lease was lost (nil while it is held or after Unlock).
func (l *Lock) Err() error {
	select {
	case <-l.lost:
		return l.err
	default:
		return nil
	}
}

// Deadline returns when the lease ends unless renewed, as this process
// estimates it from the agent's last report.
func (l *Lock) Deadline() time.Time {
	d := <-l.deadline
	l.deadline <- d
	return d
}

// run renews the lease every TTL/3 and reads the agent's frames until the
// session ends; it closes lost if the lease ends other than by Unlock.
func (l *Lock) run() {
	defer close(l.closed)
	frames := make(chan LockEvent)
	ended := make(chan error, 1)
	go func() {
		for {
			ev, final, err := readLockFrame(l.cc)
			if err != nil || final {
				if err == nil && ev.State != LockReleased {
					err = fmt.Errorf("rpc: lock %q: the agent ended the session", l.name)
				}
				ended <- err
				return
			}
			select {
			case frames <- ev:
			case <-l.closed: // run has returned and closed the connection
				return
			}
		}
	}()
	renew := time.NewTicker(max(l.ttl/3, 100*time.Millisecond))
	defer renew.Stop()
	for {
		expiry := time.NewTimer(time.Until(l.Deadline()))
		select {
		case ev := <-frames:
			switch ev.State {
			case LockRenewed:
				<-l.deadline
				l.deadline <- time.Now().Add(time.Duration(ev.RemainingMS) * time.Millisecond)
			case LockRevoked:
				select {
				case <-l.revoked:
				default:
					close(l.revoked)
				}
			}
		case <-renew.C:
			if err := l.write(time.Now().Add(l.ttl/3), Request{Seq: 2, Op: OpLockRenew}); err != nil {
				l.lose(fmt.Errorf("rpc: lock %q: renew: %w", l.name, err))
			}
		case <-expiry.C:
			l.lose(fmt.Errorf("%w: %q ran out before the agent renewed it", ErrLost, l.name))
		case err := <-ended:
			if err != nil {
				l.lose(err)
			}
			l.final <- err
			expiry.Stop()
			l.cc.nc.Close()
			return
		case <-l.done:
			expiry.Stop()
			l.cc.nc.Close()
			return
		}
		expiry.Stop()
	}
}

// write sends one frame of the session by deadline (none when zero).
func (l *Lock) write(deadline time.Time, req Request) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	_ = l.cc.nc.SetWriteDeadline(deadline)
	return l.cc.writeMsg(req)
}

// lose closes Lost with err, once.
func (l *Lock) lose(err error) {
	select {
	case <-l.lost:
	default:
		l.err = err
		close(l.lost)
	}
}

// Unlock releases the lease and waits, within ctx, for the agent to
// confirm; the connection is closed either way (which releases it too).
// Unlocking a lost lease returns why it was lost.
func (l *Lock) Unlock(ctx context.Context) error {
	if err := l.Err(); err != nil {
		close(l.done)
		<-l.closed
		return err
	}
	deadline, _ := ctx.Deadline()
	werr := l.write(deadline, Request{Seq: 3, Op: OpRelease})
	var err error
	select {
	case err = <-l.final:
	case <-ctx.Done():
		err = ctx.Err()
	case <-l.closed:
	}
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	<-l.closed
	if werr != nil && !errors.Is(werr, io.EOF) {
		return fmt.Errorf("rpc: unlock %q: %w", l.name, werr)
	}
	if err != nil {
		return fmt.Errorf("rpc: unlock %q: %w", l.name, err)
	}
	return nil
}

// Locks lists the named leases the leader holds, and their waiters.
func (c *Client) Locks(ctx context.Context) ([]LockInfo, error) {
	var out []LockInfo
	err := c.call(ctx, OpLocks, &out)
	return out, err
}
