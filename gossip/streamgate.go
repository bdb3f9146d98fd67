package gossip

import (
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// Defaults for the inbound gossip streams (Config.MaxMembers,
// Config.MaxInboundStreams).
const (
	// DefaultMaxMembers is the default Config.MaxMembers.
	DefaultMaxMembers = 128
	// DefaultMaxInboundStreams is the default Config.MaxInboundStreams.
	DefaultMaxInboundStreams = 64
	// maxScreenTimeout bounds the time an inbound stream has to deliver its
	// first message (Timing.TCPTimeout if shorter). memberlist's peers write
	// it as soon as they connect.
	maxScreenTimeout = 5 * time.Second
)

// streamGate stands between memberlist's TCP listener and memberlist. It
// admits at most max inbound streams at once, reads each one's first
// message within timeout, refuses those that screenStream refuses, and
// hands memberlist the others as replayConns. A stream that has not yet
// delivered its message is unproven: when max streams are open and a new
// one arrives, the oldest unproven one is closed to make room; if all are
// proven, the new one is refused. Its methods are safe for concurrent use.
type streamGate struct {
	max      int
	timeout  time.Duration
	limits   screenLimits
	out      chan net.Conn // to memberlist
	stopping <-chan struct{}
	refused  *refusalLog
	wg       sync.WaitGroup // screening goroutines

	mu        sync.Mutex
	open      int           // streams holding a slot: screening or handed over
	screening []*gateStream // unproven, oldest first
	passed    uint64        // streams handed to memberlist so far
	closed    bool
}

// gateStream is one inbound stream being screened. Guarded by streamGate.mu.
type gateStream struct {
	conn    net.Conn
	evicted bool
}

// admit takes an accepted stream and screens it in the background, or
// refuses it.
func (g *streamGate) admit(conn net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		conn.Close()
		return
	}
	if g.open >= g.max {
		if len(g.screening) == 0 {
			g.refused.note("limit", remoteOf(conn), nil)
			conn.Close()
			return
		}
		g.evictLocked()
	}
	s := &gateStream{conn: conn}
	g.screening = append(g.screening, s)
	g.open++
	g.wg.Add(1)
	go g.screen(s)
}

// evictLocked closes the oldest unproven stream and frees its slot.
func (g *streamGate) evictLocked() {
	old := g.screening[0]
	g.screening = slices.Delete(g.screening, 0, 1)
	old.evicted = true
	g.open--
	old.conn.Close()
	g.refused.note("evicted", remoteOf(old.conn), nil)
}

// screen reads s's first message and hands s to memberlist, or closes it.
func (g *streamGate) screen(s *gateStream) {
	defer g.wg.Done()
	s.conn.SetReadDeadline(time.Now().Add(g.timeout))
	msg, err := screenStream(s.conn, g.limits)
	if err != nil {
		if g.drop(s) {
			g.refused.note(screenReason(err), remoteOf(s.conn), err)
		}
		return
	}
	if !g.prove(s) {
		return
	}
	s.conn.SetReadDeadline(time.Time{}) // memberlist sets its own
	rc := &replayConn{Conn: s.conn, rest: msg, release: g.release}
	select {
	case g.out <- rc:
	case <-g.stopping:
		rc.Close()
	}
}

// drop closes a stream that failed screening and frees its slot; it
// reports false if the stream had been evicted (and counted) already.
func (g *streamGate) drop(s *gateStream) bool {
	s.conn.Close()
	g.mu.Lock()
	defer g.mu.Unlock()
	if s.evicted {
		return false
	}
	g.screening = slices.DeleteFunc(g.screening, func(x *gateStream) bool { return x == s })
	g.open--
	return true
}

// prove moves a stream that delivered its message out of the unproven
// ones; it keeps its slot until memberlist closes it.
func (g *streamGate) prove(s *gateStream) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s.evicted {
		return false
	}
	g.screening = slices.DeleteFunc(g.screening, func(x *gateStream) bool { return x == s })
	g.passed++
	return true
}

func (g *streamGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open--
}

// close closes every stream being screened and waits for their goroutines.
// Streams already handed to memberlist are memberlist's to close.
func (g *streamGate) close() {
	g.mu.Lock()
	g.closed = true
	for _, s := range g.screening {
		s.conn.Close()
	}
	g.mu.Unlock()
	g.wg.Wait()
	g.refused.stop()
}

func remoteOf(conn net.Conn) string {
	if a := conn.RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}

// replayConn is a screened stream as memberlist sees it: reads return the
// message the gate read, then io.EOF (memberlist reads one message per
// inbound stream), so memberlist reads nothing the gate did not check.
// Writes, deadlines and addresses are the connection's. Close frees the
// gate's slot once.
type replayConn struct {
	net.Conn
	mu      sync.Mutex
	rest    []byte
	release func()
	once    sync.Once
}

// Read returns the rest of the screened message, then io.EOF.
func (c *replayConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rest == nil {
		return 0, io.EOF
	}
	n := copy(p, c.rest)
	c.rest = c.rest[n:]
	if len(c.rest) == 0 {
		c.rest = nil
	}
	return n, nil
}

// Close closes the connection and frees its slot.
func (c *replayConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
