package gossip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/internal/wire"
)

// Call sends req to the peer transport at addr and returns the response of
// its Handler. It is bounded by ctx, or by CallTimeout if ctx has no
// deadline. A handler's error is returned as a *RemoteError. Errors wrapping
// ErrUnreachable mean the request was certainly not delivered; after other
// errors the peer may or may not have handled it. Call never sends a request
// twice.
func (t *Transport) Call(ctx context.Context, addr string, req []byte) ([]byte, error) {
	resp, _, err := t.CallRetried(ctx, addr, req)
	return resp, err
}

// CallRetried is Call, and reports for an answered call whether its time
// counts a retransmission: the kernel sent its connection's SYN or its
// request more than once before the answer came (the connection's count
// of retransmitted segments rose), or the call waited on a connect that
// turned stale (staleConnect). Such a call's duration is no round trip
// but a retransmission timeout, or the cut that held its packets, and a
// caller estimating round trips leaves it out, as TCP does with its own
// retransmitted segments (Karn's rule). An answer a cut held shows too:
// the cut held the acknowledgement of the request with it (the
// acknowledgement rides on the answer, or was sent after the cut began),
// so the request went again; only a cut that begins between a separate
// acknowledgement and the answer hides it. Where the kernel does not
// report retransmissions (not Linux), only the stale connects show.
func (t *Transport) CallRetried(ctx context.Context, addr string, req []byte) (resp []byte, retried bool, err error) {
	if t.isClosed() {
		return nil, false, ErrClosed
	}
	// Check the size once, for the largest deadline stamp; each
	// connection stamps its own (roundTrip).
	if n := maxRequestFrame(len(req)); n > t.cfg.MaxFrame {
		return nil, false, fmt.Errorf("gossip: call %s: request of %d bytes exceeds the frame limit of %d: %w",
			addr, n, t.cfg.MaxFrame, wire.ErrFrameTooLarge)
	}
	ctx, cancel := t.callContext(ctx)
	defer cancel()
	r, retried, err := t.exchange(ctx, addr, req)
	if err != nil {
		return nil, false, t.callError(ctx, addr, err)
	}
	if r.Err != "" {
		return nil, retried, &RemoteError{Message: r.Err}
	}
	return r.Body, retried, nil
}

// callContext bounds ctx by CallTimeout if it has no deadline, and ends it
// when the transport closes.
func (t *Transport) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	var cancel context.CancelFunc
	if _, ok := ctx.Deadline(); ok {
		ctx, cancel = context.WithCancel(ctx)
	} else {
		ctx, cancel = context.WithTimeout(ctx, t.cfg.CallTimeout)
	}
	stop := context.AfterFunc(t.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// callError explains why a call failed, preferring the transport's or the
// context's end to the network error it caused (named once, when err is
// that end itself).
func (t *Transport) callError(ctx context.Context, addr string, err error) error {
	var cause error
	switch {
	case t.isClosed():
		cause = ErrClosed
	case ctx.Err() != nil:
		cause = ctx.Err()
	case errors.Is(err, os.ErrDeadlineExceeded):
		cause = context.DeadlineExceeded
	}
	if cause == nil || errors.Is(err, cause) {
		return fmt.Errorf("gossip: call %s: %w", addr, err)
	}
	return fmt.Errorf("gossip: call %s: %w: %w", addr, cause, err)
}

// exchange sends the request body req on a pooled or new connection and
// returns the response, and whether its time counts a retransmission
// (CallRetried). If a pooled connection fails before any byte of the
// request is written, the request goes once more on another connection.
func (t *Transport) exchange(ctx context.Context, addr string, req []byte) (response, bool, error) {
	for attempt := 0; ; attempt++ {
		c, waitedStale, err := t.conn(ctx, addr)
		if err != nil {
			return response{}, false, err
		}
		base := c.retransBase()
		resp, sent, err := c.roundTrip(ctx, req)
		if err == nil {
			return resp, waitedStale || c.retransmittedSince(base), nil
		}
		if sent || ctx.Err() != nil || attempt > 0 {
			return resp, false, err
		}
		t.logger.Debug("gossip: pooled peer connection failed before sending; retrying on another",
			"addr", addr, "err", err)
	}
}

// conn returns a pooled connection to addr, or a new one. One dial to a
// peer runs at a time, unless its TCP connect is stale (staleConnect), and
// calls that find it running wait for it, for a connection of another
// call to come back to the pool, or for its connect to turn stale,
// whichever comes first. Its handshake is
// bounded by DialTimeout, not by the call that started it, so a handshake
// that outlasts its call still leaves a connection in the pool for the
// next. On an overloaded host, where
// handshakes are slow, calls that each dialled and gave up at their own
// deadline wasted every handshake they started and started more. On a
// slow link (one-way delays of 1.5 s), where handshakes outlast
// DialTimeout, calls that waited only for the dial failed with it one
// after another while the connection of the call before came back to the
// pool unused, and a leader whose renewals were granted in 3 s lost its
// lease.
func (t *Transport) conn(ctx context.Context, addr string) (c *clientConn, waitedStale bool, err error) {
	for {
		if c := t.takeIdle(addr); c != nil {
			return c, waitedStale, nil
		}
		d, pooled, err := t.pendingDial(ctx, addr)
		if err != nil {
			return nil, false, err
		}
		again, err := d.await(ctx, pooled)
		if err != nil {
			return nil, false, err
		}
		if again {
			waitedStale = waitedStale || d.stale(time.Now())
			continue // a connection came back to the pool, or d's connect turned stale
		}
		if d.err != nil {
			if c := t.takeIdle(addr); c != nil {
				return c, waitedStale, nil // one came back as the dial failed
			}
			if errors.Is(d.err, context.Canceled) && ctx.Err() == nil {
				continue // the call that started it ended, cutting its connect short: dial afresh
			}
			return nil, false, d.err
		}
		// The new connection is in the pool, unless another call took it
		// first; then look again.
	}
}

// dialing is one dial in progress; err is set before done is closed.
type dialing struct {
	done chan struct{}
	err  error
	// pooled is closed, and replaced, each time a connection to the
	// dial's address comes back to the pool while it runs; guarded by
	// the transport's mu.
	pooled chan struct{}
	began  time.Time
	// connected: its TCP connect is done (its handshake may still run).
	connected atomic.Bool
}

// staleConnect is how long a dial's TCP connect may run before a call
// that finds it, or waits for it, starts a dial of its own (which then
// stands for the address) instead of waiting on. A connect that long has
// most likely lost its SYN or the answer to a cut, and the kernel sends it
// again only 1 s after the first, then 2 s after that: once the cut
// healed, every call to the peer waited for that retry. In the fault
// harness a follower asked its leader over a dial begun during a cut, and
// its questions after the heal waited 850 ms for that dial to give up,
// connected in a millisecond afterwards, and came too late: the follower
// had forgotten its leader ("no leader" for 3-141 ms after heals with no
// fault on). Calls that joined a connect while it was fresh still waited
// for its retry: a follower asking every 200 ms put its first question
// after a heal on a connect begun in the cut less than 250 ms before, had
// the answer 26 ms after it had forgotten its leader, and now dials
// afresh once that connect turns stale (dialing.await). A connect over a
// slow link (round trips of seconds) is not stale, only slow: it then
// costs at most one extra connect per staleConnect, each bounded as every
// dial.
const staleConnect = 250 * time.Millisecond

// stale reports whether d's TCP connect has run longer than staleConnect.
func (d *dialing) stale(now time.Time) bool {
	return !d.connected.Load() && now.Sub(d.began) > staleConnect
}

// await waits until d is done, a connection comes back to the pool, d's
// TCP connect turns stale, or ctx ends; again reports that the caller
// should look for a connection again (pooled, or stale: a call that
// joined a fresh connect does not wait for the kernel's retry of a SYN
// lost to a cut, but dials afresh as a call arriving then would, so that
// a heal in the meantime reaches the peer at once).
func (d *dialing) await(ctx context.Context, pooled <-chan struct{}) (again bool, err error) {
	var turnsStale <-chan time.Time
	if !d.connected.Load() {
		tm := time.NewTimer(time.Until(d.began.Add(staleConnect)) + time.Millisecond)
		defer tm.Stop()
		turnsStale = tm.C
	}
	for {
		select {
		case <-d.done:
			return false, nil
		case <-pooled:
			return true, nil
		case <-turnsStale:
			if d.stale(time.Now()) {
				return true, nil
			}
			turnsStale = nil // connected: its handshake is bounded by DialTimeout
		case <-ctx.Done():
			return false, fmt.Errorf("%w: waiting for a connection: %w", ErrUnreachable, ctx.Err())
		}
	}
}

// pendingDial returns the dial to addr in progress, starting one for the
// call ctx if none is, or if the one in progress is stale (staleConnect),
// and a channel closed when a connection to addr is pooled meanwhile. The
// TCP connect is bounded by ctx as well as DialTimeout: a peer that does
// not answer (down, or cut off by a partition) is dialled afresh by the
// next call, as soon as it is back. The handshake after it, the slow part
// on a loaded host, is bounded by DialTimeout alone.
func (t *Transport) pendingDial(ctx context.Context, addr string) (*dialing, <-chan struct{}, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, nil, ErrClosed
	}
	now := time.Now()
	old := t.dialing[addr]
	if old != nil && !old.stale(now) {
		return old, old.pooled, nil
	}
	d := &dialing{done: make(chan struct{}), pooled: make(chan struct{}), began: now}
	if old != nil {
		d.pooled = old.pooled // the calls still waiting for old wake too
	}
	t.dialing[addr] = d
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		began := time.Now()
		dctx, cancel := context.WithTimeout(t.ctx, t.cfg.DialTimeout)
		cctx, cancelConnect := context.WithCancel(dctx)
		stop := context.AfterFunc(ctx, cancelConnect)
		c, err := t.dial(cctx, dctx, addr, &d.connected)
		stop()
		cancelConnect()
		cancel()
		if err == nil {
			t.logger.Debug("gossip: peer connection made", "addr", addr, "took", time.Since(began))
			t.release(c)
		}
		t.mu.Lock()
		if t.dialing[addr] == d {
			delete(t.dialing, addr)
		}
		t.mu.Unlock()
		d.err = err
		close(d.done)
	}()
	return d, d.pooled, nil
}

// clientConn is one outbound connection. Its reader goroutine does all the
// reading: it hands each response to the call in flight, and it sees at once
// when the peer closes an idle pooled connection, or when the idle deadline
// passes, and then closes the connection and drops it from the pool. A call
// that ends before its response came abandons the exchange: the reader
// then reads the late response, drops it, and pools the connection again,
// so that a peer that answers late does not cost a new connection per call.
type clientConn struct {
	t      *Transport
	addr   string
	conn   net.Conn
	born   time.Time     // when its TCP connect began; requests' deadlines count from it
	frames chan []byte   // the response to the call in flight; capacity 1
	dead   chan struct{} // closed when the reader exits
	err    error         // why the reader exited; read only after dead is closed
	state  atomic.Int32  // connIdle, connInFlight or connAbandoned
	raw    net.Conn      // the TCP connection under conn, whose retransmissions the kernel counts
	// used: an exchange ran on it. Read and set by the call that holds
	// the connection (the pool hands it over under t.mu).
	used bool

	idleUntil time.Time // while pooled; guarded by t.mu
}

// The states of a clientConn's exchange.
const (
	connIdle      int32 = iota // no request outstanding
	connInFlight               // a call awaits the response
	connAbandoned              // the call ended first; the reader drops the response
)

// dial opens a new connection to addr, the connect bounded by connectCtx
// and the handshake by ctx, and starts its reader. It sets connected once
// the TCP connect is done.
func (t *Transport) dial(connectCtx, ctx context.Context, addr string, connected *atomic.Bool) (*clientConn, error) {
	var d net.Dialer
	t.dialed.Add(1)
	// Taken before the connect: the serving side accepts after it ends,
	// so it never places a request's deadline earlier than this side's
	// (later by the connect's duration, usually a round trip). Taken
	// after, a caller descheduled between the connect and this line
	// would have its deadlines placed early by that much.
	born := time.Now()
	raw, err := d.DialContext(connectCtx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	connected.Store(true)
	conn, err := t.wrapClient(ctx, raw, addr)
	if err != nil {
		raw.Close()
		return nil, fmt.Errorf("%w: handshake: %w", ErrUnreachable, err)
	}
	c := &clientConn{t: t, addr: addr, conn: conn, raw: raw, born: born, frames: make(chan []byte, 1), dead: make(chan struct{})}
	if !t.addClient(c) {
		conn.Close()
		return nil, ErrClosed
	}
	go c.read()
	return c, nil
}

func (t *Transport) wrapClient(ctx context.Context, raw net.Conn, addr string) (net.Conn, error) {
	if t.cfg.Wrap == nil {
		return raw, nil
	}
	deadline, _ := ctx.Deadline()
	raw.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	return t.cfg.Wrap.Client(raw, addr)
}

// addClient registers c, and its reader for Close to wait on, unless the
// transport is closed.
func (t *Transport) addClient(c *clientConn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.clients[c] = struct{}{}
	t.wg.Add(1)
	return true
}

// forget drops a dead connection from the transport and its pool.
func (t *Transport) forget(c *clientConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.clients, c)
	if list, ok := t.idle[c.addr]; ok {
		list = slices.DeleteFunc(list, func(x *clientConn) bool { return x == c })
		if len(list) == 0 {
			delete(t.idle, c.addr)
		} else {
			t.idle[c.addr] = list
		}
	}
}

// takeIdle returns the most recently used idle connection to addr, closing
// any that are dead, about to reach their idle deadline, or older than
// maxConnAge.
func (t *Transport) takeIdle(addr string) *clientConn {
	now := time.Now()
	soon := now.Add(min(time.Second, t.cfg.IdleTimeout/4))
	t.mu.Lock()
	defer t.mu.Unlock()
	list := t.idle[addr]
	for len(list) > 0 {
		c := list[len(list)-1]
		list = list[:len(list)-1]
		t.idle[addr] = list
		if c.idleUntil.After(soon) && !c.isDead() && now.Sub(c.born) < maxConnAge {
			return c
		}
		c.conn.Close() // its reader forgets it
	}
	delete(t.idle, addr)
	return nil
}

// release pools c for reuse, or closes it if the pool for its peer is full.
func (t *Transport) release(c *clientConn) {
	until := time.Now().Add(t.cfg.IdleTimeout)
	c.conn.SetDeadline(until)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || len(t.idle[c.addr]) >= t.cfg.MaxIdlePerPeer {
		c.conn.Close()
		return
	}
	c.idleUntil = until
	t.idle[c.addr] = append(t.idle[c.addr], c)
	if d := t.dialing[c.addr]; d != nil {
		close(d.pooled) // wake the calls waiting for the dial
		d.pooled = make(chan struct{})
	}
}

func (c *clientConn) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// read delivers response frames until the connection fails or a frame comes
// that no call asked for. A late response to an abandoned exchange is
// dropped and the connection pooled again.
func (c *clientConn) read() {
	defer c.t.wg.Done()
	for {
		body, err := wire.ReadFrame(c.conn, c.t.cfg.MaxFrame)
		if err == nil {
			switch {
			case c.state.CompareAndSwap(connInFlight, connIdle):
				c.frames <- body
				continue
			case c.state.CompareAndSwap(connAbandoned, connIdle):
				c.t.late.Add(1)
				c.t.release(c)
				continue
			}
			err = errors.New("unsolicited frame from peer")
		}
		c.err = err
		c.conn.Close()
		c.t.forget(c)
		close(c.dead)
		return
	}
}

// roundTrip writes the request body req, stamped with its call's
// deadline, and waits for the response. sent reports whether any byte of
// the request may have left. After a clean exchange the connection is
// pooled again; after a call that ended before its response came, once
// the reader has dropped the late response (within the late-response
// wait, or the connection closes).
func (c *clientConn) roundTrip(ctx context.Context, req []byte) (resp response, sent bool, err error) {
	if c.isDead() {
		return response{}, false, c.err
	}
	deadline, ok := ctx.Deadline() // Call always sets one
	frame, err := c.t.encodeFrame(request{Body: req, Until: c.until(deadline, ok)}, "request")
	if err != nil {
		return response{}, false, err // Call checked the size: not expected
	}
	c.conn.SetWriteDeadline(deadline)
	if ok {
		c.conn.SetReadDeadline(deadline.Add(c.t.lateWait()))
	} else {
		c.conn.SetReadDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { c.conn.SetWriteDeadline(time.Unix(1, 0)) })
	c.state.Store(connInFlight)
	w := &countingWriter{w: c.conn}
	err = wire.WriteFrame(w, frame)
	stopped := stop()
	if err != nil {
		c.conn.Close()
		return response{}, w.n > 0, err
	}
	if !stopped {
		// The call ended during the write, which may have been cut short.
		c.conn.Close()
		return response{}, true, ctx.Err()
	}
	body, err := c.await(ctx)
	if err != nil {
		return response{}, true, err
	}
	if ok && !time.Now().Before(deadline) {
		// Late, though it came before the call's timer fired: a handler
		// that ran out of the caller's time answers at its deadline
		// (which the serving side never places earlier), and this call
		// fails by its own deadline, as it would have a moment later.
		c.t.late.Add(1)
		c.t.release(c)
		return response{}, true, context.DeadlineExceeded
	}
	if err := wire.Unmarshal(body, &resp); err != nil {
		c.conn.Close()
		return response{}, true, fmt.Errorf("bad response: %w", err)
	}
	c.t.release(c)
	return resp, true, nil
}

// await waits for the response frame, the reader's end or the end of ctx,
// which abandons the exchange.
func (c *clientConn) await(ctx context.Context) ([]byte, error) {
	select {
	case body := <-c.frames:
		return body, nil
	case <-c.dead:
		select {
		case body := <-c.frames: // the reader died just after delivering
			return body, nil
		default:
			return nil, c.err
		}
	case <-ctx.Done():
		if c.state.CompareAndSwap(connInFlight, connAbandoned) {
			c.conn.SetReadDeadline(time.Now().Add(c.t.lateWait()))
			return nil, ctx.Err()
		}
		return <-c.frames, nil // the response won the race
	}
}

// retransBase is the count of c's retransmitted segments an exchange
// starting now compares with (retransmittedSince): zero for c's first
// exchange, which waited for its connect, so that a SYN sent again counts
// too.
func (c *clientConn) retransBase() uint32 {
	if !c.used {
		c.used = true
		return 0
	}
	n, _ := retransmits(c.raw)
	return n
}

// retransmittedSince reports whether the kernel has retransmitted any of
// c's segments since it counted base of them.
func (c *clientConn) retransmittedSince(base uint32) bool {
	n, ok := retransmits(c.raw)
	return ok && n > base
}

// until is the request stamp for a call ending at deadline (if ok):
// milliseconds since the connect, rounded up, at least 1; zero for no
// deadline.
func (c *clientConn) until(deadline time.Time, ok bool) uint64 {
	if !ok {
		return 0
	}
	ms := (deadline.Sub(c.born) + time.Millisecond - 1) / time.Millisecond
	return uint64(max(ms, 1))
}

// lateWait is how long a connection waits for the response to an
// abandoned call before it is closed: the serving side answers within its
// HandlerTimeout.
func (t *Transport) lateWait() time.Duration { return t.cfg.HandlerTimeout + time.Second }

// countingWriter counts the bytes its writer accepted.
type countingWriter struct {
	w io.Writer
	n int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	w.n += n
	return n, err
}
