package rpc

import (
	"cmp"
	"context"
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

// Server defaults, used where a ServerConfig field is zero.
const (
	// DefaultMaxConns bounds the connections served at once.
	DefaultMaxConns = 64
	// DefaultMode is the socket file's permission bits.
	DefaultMode os.FileMode = 0o600
	// DefaultWriteTimeout bounds every frame write; a client that does not
	// read for this long is cut off.
	DefaultWriteTimeout = 5 * time.Second
	// DefaultHandshakeTimeout bounds the wait for a client's Hello. Every
	// client of tenure sends its Hello as soon as it connects; 2 s is ample
	// on a loaded host and frees a slot held by a silent client soon.
	DefaultHandshakeTimeout = 2 * time.Second
	// DefaultIdleTimeout closes a greeted connection that sends no request
	// for this long (watches are exempt). tenure's own clients either make
	// a call and close, or poll every half second (tenure run), so a minute
	// of silence means a client that forgot its connection, which should
	// not hold a slot for ever.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultMaxFrame bounds frame bodies in both directions, in bytes.
	DefaultMaxFrame = wire.DefaultMaxFrame
	// MinMaxFrame is the smallest MaxFrame accepted: room for a HelloReply
	// and any error response.
	MinMaxFrame = 1 << 10
	// MaxMaxFrame is the largest MaxFrame accepted: the largest frame the
	// Go client reads, whatever the server announces.
	MaxMaxFrame = 16 << 20
	// busyWriteTimeout bounds the too_many_connections reply, which the
	// accept loop writes itself.
	busyWriteTimeout = 100 * time.Millisecond
)

// ServerConfig configures a Server. Listen copies it and never writes back.
type ServerConfig struct {
	// Path is the socket file to create. Required.
	Path string
	// Backend answers requests. Required.
	Backend Backend
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// AgentVersion is reported to clients in the handshake.
	AgentVersion string
	// MaxFrame bounds frame bodies in both directions, in bytes; 0 means
	// DefaultMaxFrame (64 KiB). From MinMaxFrame (1 KiB) to MaxMaxFrame
	// (16 MiB).
	MaxFrame int
	// MaxConns bounds the connections served at once; 0 means
	// DefaultMaxConns. Over the limit a client gets too_many_connections.
	MaxConns int
	// Mode is the socket file's permission bits; 0 means DefaultMode (0600).
	Mode os.FileMode
	// Group, when non-nil, is the group ID given the socket and (if this
	// server owns it) its directory, so that a group of trusted users can
	// connect: give Mode 0660 with it. The directory becomes 0750.
	Group *int
	// IdleTimeout closes a connection that sends no request for this long
	// (up to an eighth more, at most a second: the deadline is not moved on
	// every request); 0 means DefaultIdleTimeout, negative means never.
	// Watch connections are exempt.
	IdleTimeout time.Duration
	// MaxConnsPerPeer bounds the connections of one client process (by its
	// PID, from SO_PEERCRED), so that one client cannot take every slot; 0
	// means a quarter of MaxConns (16 of 64). Where the peer cannot be told
	// (no SO_PEERCRED), connections are not held to it.
	MaxConnsPerPeer int
	// MaxUngreeted bounds the connections that have not completed the
	// handshake yet; 0 means a quarter of MaxConns (16 of 64).
	MaxUngreeted int
	// LogInterval is how often, at most, each kind of warning about clients
	// (refused connections, malformed frames) is logged, with the count of
	// repeats; 0 means DefaultLogInterval.
	LogInterval time.Duration
	// WriteTimeout bounds every frame write (up to an eighth more, at most
	// a second, as IdleTimeout); 0 means DefaultWriteTimeout.
	WriteTimeout time.Duration
	// HandshakeTimeout bounds the wait for the client's Hello; 0 means
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// OnRequest, when set, is called for every request frame read, on the
	// connection's goroutine, before the request is parsed: the agent
	// counts them to size its process (internal/procs). It must be fast
	// and must not block.
	OnRequest func()
}

// withDefaults returns a copy of c with zero fields set to their defaults,
// or an error naming the first invalid field.
func (c ServerConfig) withDefaults() (ServerConfig, error) {
	if c.Path == "" || c.Backend == nil {
		return c, errors.New("rpc: server config needs a Path and a Backend")
	}
	if c.MaxFrame < 0 || c.MaxConns < 0 || c.MaxConnsPerPeer < 0 || c.MaxUngreeted < 0 ||
		c.WriteTimeout < 0 || c.HandshakeTimeout < 0 || c.LogInterval < 0 {
		return c, errors.New("rpc: server config has a negative limit or timeout")
	}
	if c.MaxFrame != 0 && (c.MaxFrame < MinMaxFrame || c.MaxFrame > MaxMaxFrame) {
		return c, fmt.Errorf("rpc: server config MaxFrame %d is not between %d and %d", c.MaxFrame, MinMaxFrame, MaxMaxFrame)
	}
	c.MaxFrame = cmp.Or(c.MaxFrame, DefaultMaxFrame)
	c.MaxConns = cmp.Or(c.MaxConns, DefaultMaxConns)
	c.MaxConnsPerPeer = cmp.Or(c.MaxConnsPerPeer, max(c.MaxConns/4, 1))
	c.MaxUngreeted = cmp.Or(c.MaxUngreeted, max(c.MaxConns/4, 1))
	if c.MaxConnsPerPeer > c.MaxConns || c.MaxUngreeted > c.MaxConns {
		return c, fmt.Errorf("rpc: server config MaxConnsPerPeer %d and MaxUngreeted %d may not exceed MaxConns %d",
			c.MaxConnsPerPeer, c.MaxUngreeted, c.MaxConns)
	}
	c.IdleTimeout = cmp.Or(c.IdleTimeout, DefaultIdleTimeout)
	c.IdleTimeout = max(c.IdleTimeout, 0) // negative: never
	c.LogInterval = cmp.Or(c.LogInterval, DefaultLogInterval)
	c.Mode = cmp.Or(c.Mode, DefaultMode)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, DefaultWriteTimeout)
	c.HandshakeTimeout = cmp.Or(c.HandshakeTimeout, DefaultHandshakeTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c, nil
}

// Server serves the protocol on a Unix socket. Create it with Listen.
type Server struct {
	cfg    ServerConfig
	log    *slog.Logger
	warns  *rateLog // warnings about clients, at most one per kind and interval
	ln     *net.UnixListener
	ctx    context.Context // cancelled by Close; parent of every request
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and every connection goroutine
	once   sync.Once

	mu        sync.Mutex // guards the fields below
	conns     map[*conn]struct{}
	perPeer   map[int]int // connections by peer PID, for known peers
	ungreeted int         // connections whose handshake has not succeeded
	nextID    uint64
	closed    bool
	refused   uint64 // connections turned away at a limit
}

// Listen creates the socket at cfg.Path and starts serving in the
// background. It creates the parent directory (mode 0700) if missing. It
// replaces a stale socket file left by a dead agent, but refuses a path
// where another agent answers and never deletes a file that is not a socket.
func Listen(cfg ServerConfig) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ln, err := listenSocket(cfg.Path, cfg.Mode, cfg.Group, cfg.Logger)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, log: cfg.Logger, ln: ln, ctx: ctx, cancel: cancel,
		warns: newRateLog(cfg.LogInterval), conns: make(map[*conn]struct{}), perPeer: map[int]int{}}
	s.wg.Add(1)
	go s.acceptLoop()
	s.log.Info("rpc: listening", "path", cfg.Path, "max_frame", cfg.MaxFrame, "max_conns", cfg.MaxConns,
		"max_conns_per_peer", cfg.MaxConnsPerPeer, "max_ungreeted", cfg.MaxUngreeted, "idle_timeout", cfg.IdleTimeout)
	return s, nil
}

// Path returns the socket path.
func (s *Server) Path() string { return s.cfg.Path }

// Refused returns how many connections the server has turned away at its
// limits (MaxConns, MaxConnsPerPeer, MaxUngreeted).
func (s *Server) Refused() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// Close stops accepting, ends watches with shutting_down, closes every
// connection, waits for every goroutine of the server and removes the
// socket file. It cancels the context of Backend calls and waits for them to
// return; a write to a client that does not read can hold it up for
// WriteTimeout. It is idempotent and safe to call concurrently.
func (s *Server) Close() error {
	s.once.Do(func() {
		s.cancel()
		s.ln.Close() // also removes the socket file
		s.mu.Lock()
		s.closed = true
		for c := range s.conns {
			c.stop()
		}
		s.mu.Unlock()
		s.wg.Wait()
		s.warns.flush()
		s.log.Info("rpc: closed", "path", s.cfg.Path)
	})
	return nil
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		nc, err := s.ln.Accept()
		if err == nil {
			backoff = 0
			s.admit(nc)
			continue
		}
		if s.ctx.Err() != nil {
			return
		}
		// Out of file descriptors, most likely: wait and retry rather than
		// stop serving for good.
		backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
		s.log.Warn("rpc: accept failed; retrying", "path", s.cfg.Path, "err", err, "backoff", backoff)
		select {
		case <-time.After(backoff):
		case <-s.ctx.Done():
			return
		}
	}
}

// admit starts serving nc, or turns it away when the server is full,
// closing, or nc's peer already holds its share of the slots.
func (s *Server) admit(nc net.Conn) {
	peer := peerOf(nc)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		nc.Close()
		return
	}
	if why := s.fullLocked(peer); why != "" {
		s.warn(s.log, "rpc: refusing connections: "+why, "max_conns", s.cfg.MaxConns,
			"max_conns_per_peer", s.cfg.MaxConnsPerPeer, "max_ungreeted", s.cfg.MaxUngreeted, "peer_pid", peer.PID)
		s.refused++
		s.refuseBusy(nc, why)
		return
	}
	s.nextID++
	c := newConn(s, nc, s.nextID, peer)
	s.conns[c] = struct{}{}
	s.ungreeted++
	if peer.Known {
		s.perPeer[peer.PID]++
	}
	s.wg.Add(1)
	go c.serve()
}

// fullLocked says why a connection from peer cannot be admitted now, or "".
func (s *Server) fullLocked(peer Peer) string {
	switch {
	case len(s.conns) >= s.cfg.MaxConns:
		return fmt.Sprintf("the agent serves %d connections already", s.cfg.MaxConns)
	case peer.Known && s.perPeer[peer.PID] >= s.cfg.MaxConnsPerPeer:
		return fmt.Sprintf("this client process holds %d connections already, its share", s.cfg.MaxConnsPerPeer)
	case s.ungreeted >= s.cfg.MaxUngreeted:
		return fmt.Sprintf("%d connections are waiting to say hello already", s.cfg.MaxUngreeted)
	}
	return ""
}

// warn logs a warning about a client, at most once per LogInterval for
// each msg.
func (s *Server) warn(l *slog.Logger, msg string, args ...any) { s.warns.warn(l, msg, args...) }

// greeted records that c's handshake succeeded: it leaves the share of
// the slots kept for connections that have not said hello.
func (s *Server) greeted(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !c.counted {
		c.counted = true
		s.ungreeted--
	}
}

// refuseBusy answers a connection over the limit with a HelloReply carrying
// too_many_connections, without reading its Hello, and closes it. A fresh
// socket's send buffer is empty, so the write does not block in practice;
// the deadline makes sure.
func (s *Server) refuseBusy(nc net.Conn, msg string) {
	defer nc.Close()
	b, err := wire.Marshal(HelloReply{Version: ProtocolVersion, Agent: s.cfg.AgentVersion,
		MaxFrame: uint64(s.cfg.MaxFrame), Error: newError(CodeBusy, msg)})
	if err != nil {
		return
	}
	_ = nc.SetWriteDeadline(time.Now().Add(busyWriteTimeout))
	_ = wire.WriteFrame(nc, b)
}

// forget removes c from the connection set and its counts.
func (s *Server) forget(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	if !c.counted {
		c.counted = true
		s.ungreeted--
	}
	if c.peer.Known {
		if s.perPeer[c.peer.PID]--; s.perPeer[c.peer.PID] <= 0 {
			delete(s.perPeer, c.peer.PID)
		}
	}
}
