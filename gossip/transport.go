package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/internal/wire"
)

// Errors returned by the peer transport. Call's errors also wrap
// context.Canceled or context.DeadlineExceeded when the call's context (or
// CallTimeout) ended it, and wire.ErrFrameTooLarge when a request or response
// exceeds the frame limit.
var (
	// ErrClosed is returned by Call after, or during, Close.
	ErrClosed = errors.New("gossip: transport closed")
	// ErrUnreachable is wrapped by Call's errors when the request was
	// certainly not delivered: the dial or the connection handshake failed.
	ErrUnreachable = errors.New("gossip: peer unreachable")
)

// RemoteError is a Handler's error, returned by Call on the calling side.
type RemoteError struct {
	Message string
}

// Error returns the remote handler's message with a prefix.
func (e *RemoteError) Error() string {
	return "gossip: remote: " + e.Message
}

// Handler answers one request from a peer. It runs on the connection's own
// goroutine: requests on one connection are handled one at a time, requests
// on different connections concurrently. ctx ends after HandlerTimeout or
// when the Transport closes; Close waits for running handlers, so a handler
// must return soon after ctx ends. A returned error reaches the caller as a
// *RemoteError holding err.Error(). A panic is recovered and reported to the
// caller as an error.
type Handler func(ctx context.Context, req []byte) ([]byte, error)

// ConnWrapper adds a layer, such as TLS, to every peer connection. Both
// methods run with a deadline set on conn (DialTimeout for Client,
// ProveTimeout for Server); on error the raw connection is closed. A
// connection that Server accepts has proven itself (see
// TransportConfig.MaxUnprovenConns).
type ConnWrapper interface {
	// Server wraps a connection accepted from a peer.
	Server(conn net.Conn) (net.Conn, error)
	// Client wraps a connection dialled to the peer at addr.
	Client(conn net.Conn, addr string) (net.Conn, error)
}

// Default values used by DefaultTransportConfig and for zero fields of
// TransportConfig.
const (
	DefaultTransportBindAddr = "0.0.0.0:7947"
	DefaultCallTimeout       = 2 * time.Second
	DefaultDialTimeout       = 3 * time.Second
	DefaultHandlerTimeout    = 2 * time.Second
	DefaultMaxIdlePerPeer    = 4
	DefaultIdleTimeout       = 20 * time.Second
	DefaultMaxConns          = 256
	DefaultMaxUnprovenConns  = 32
	DefaultProveTimeout      = 3 * time.Second
)

// TransportConfig configures a Transport. ListenTransport copies it. Zero
// fields take the defaults documented on each field.
type TransportConfig struct {
	// BindAddr is the TCP address to listen on, "host:port"; port 0 picks a
	// free port. Default DefaultTransportBindAddr.
	BindAddr string
	// Handler answers requests from peers. Required.
	Handler Handler
	// MaxFrame bounds a request or response frame, in bytes, including a few
	// bytes of encoding. Default wire.DefaultMaxFrame.
	MaxFrame int
	// CallTimeout bounds a Call whose context has no deadline. Default
	// DefaultCallTimeout.
	CallTimeout time.Duration
	// DialTimeout bounds a new connection to a peer: the TCP connect and
	// Wrap.Client's handshake. The handshake is not bounded by the call
	// that started the dial (the connect is): one that outlasts its call
	// leaves its connection in the pool for the next. Default
	// DefaultDialTimeout, the serving side's default ProveTimeout, after
	// which it would close the connection.
	DialTimeout time.Duration
	// HandlerTimeout bounds each request on the serving side (the handler's
	// context) and the write of its response. Default DefaultHandlerTimeout.
	HandlerTimeout time.Duration
	// MaxIdlePerPeer is how many idle connections to each peer are kept for
	// reuse. Default DefaultMaxIdlePerPeer.
	MaxIdlePerPeer int
	// IdleTimeout closes a pooled connection unused for this long. The
	// serving side closes connections idle for twice as long (40 s by
	// default), so that a client never reuses one the server is closing;
	// set it alike on every agent. Default DefaultIdleTimeout (20 s).
	IdleTimeout time.Duration
	// MaxConns bounds the proven inbound connections served at once; one
	// that proves itself beyond it is closed. Default DefaultMaxConns.
	MaxConns int
	// MaxUnprovenConns bounds the inbound connections that have not yet
	// proven themselves: with Wrap, completed Wrap.Server (for KeyedTLS, the
	// handshake with a cluster key); without, sent one well-formed request
	// frame. When that many are waiting, a new connection closes the oldest
	// of them, so connections that never prove themselves cannot keep peers
	// out: a peer proves itself within a round trip, long before an attacker
	// could open MaxUnprovenConns newer connections. Default
	// DefaultMaxUnprovenConns (32).
	MaxUnprovenConns int
	// ProveTimeout closes an inbound connection that has not proven itself
	// within this long; it bounds Wrap.Server. It should be at least the
	// peers' DialTimeout, which bounds their connect and handshake.
	// Default DefaultProveTimeout (3 s).
	ProveTimeout time.Duration
	// Wrap, if set, wraps every connection (for authentication). nil means
	// plain TCP.
	Wrap ConnWrapper
	// Logger receives the transport's logs. nil discards them.
	Logger *slog.Logger
}

// DefaultTransportConfig returns a TransportConfig with every default filled
// in; only Handler is left to set.
func DefaultTransportConfig() TransportConfig {
	return TransportConfig{}.withDefaults()
}

func (c TransportConfig) withDefaults() TransportConfig {
	setDefault(&c.BindAddr, DefaultTransportBindAddr)
	setDefault(&c.MaxFrame, wire.DefaultMaxFrame)
	setDefault(&c.CallTimeout, DefaultCallTimeout)
	setDefault(&c.DialTimeout, DefaultDialTimeout)
	setDefault(&c.HandlerTimeout, DefaultHandlerTimeout)
	setDefault(&c.MaxIdlePerPeer, DefaultMaxIdlePerPeer)
	setDefault(&c.IdleTimeout, DefaultIdleTimeout)
	setDefault(&c.MaxConns, DefaultMaxConns)
	setDefault(&c.MaxUnprovenConns, DefaultMaxUnprovenConns)
	setDefault(&c.ProveTimeout, DefaultProveTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// Validate reports every problem with c, after applying the defaults of
// zero fields.
func (c TransportConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Handler == nil {
		errs = append(errs, errors.New("gossip: transport: handler is required"))
	}
	if _, _, err := splitHostPort(c.BindAddr); err != nil {
		errs = append(errs, fmt.Errorf("gossip: transport: bind address %q: %w", c.BindAddr, err))
	}
	if c.MaxFrame < 64 {
		errs = append(errs, fmt.Errorf("gossip: transport: max frame %d is below 64 bytes", c.MaxFrame))
	}
	if c.CallTimeout < 0 || c.DialTimeout < 0 || c.HandlerTimeout < 0 || c.IdleTimeout < 0 || c.ProveTimeout < 0 {
		errs = append(errs, errors.New("gossip: transport: timeouts must be positive"))
	}
	if c.MaxIdlePerPeer < 0 || c.MaxConns < 0 || c.MaxUnprovenConns < 0 {
		errs = append(errs, errors.New("gossip: transport: connection limits must be positive"))
	}
	return errors.Join(errs...)
}

// Transport serves peer requests with a Handler and makes requests to peers
// with Call. Its methods are safe for concurrent use.
type Transport struct {
	cfg    TransportConfig
	logger *slog.Logger
	ln     net.Listener
	ctx    context.Context // cancelled by Close; parent of handler contexts
	cancel context.CancelFunc
	wg     sync.WaitGroup // accept loop, server connections, client readers

	refused *refusalLog // inbound connections closed by the limits
	dialed  atomic.Uint64
	accepts atomic.Uint64
	late    atomic.Uint64 // responses that came after their call ended
	stale   *refusalLog   // requests that came after their caller gave up

	mu       sync.Mutex
	closed   bool
	inbound  map[*inbound]struct{}    // every accepted connection
	unproven []*inbound               // not yet proven, oldest first
	proven   int                      // proven inbound connections
	clients  map[*clientConn]struct{} // every open outbound connection
	idle     map[string][]*clientConn // pooled by address, most recent last
	dialing  map[string]*dialing      // the dial in progress, by address

	closeOnce sync.Once
}

// ListenTransport listens on cfg.BindAddr and serves requests until Close.
func ListenTransport(cfg TransportConfig) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ln, err := net.Listen("tcp", cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("gossip: transport: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Transport{
		cfg:     cfg,
		logger:  cfg.Logger,
		ln:      ln,
		ctx:     ctx,
		cancel:  cancel,
		refused: newRefusalLog(cfg.Logger, slog.LevelWarn, "gossip: closed peer connections that did not prove themselves in time or exceeded the limits"),
		// A heal delivers late requests in bursts; they are no attack.
		stale:   newRefusalLog(cfg.Logger, slog.LevelInfo, "gossip: peer requests that came after their callers had given up (held by a cut link, or a stalled host) were answered with an error, not handled"),
		inbound: make(map[*inbound]struct{}),
		clients: make(map[*clientConn]struct{}),
		idle:    make(map[string][]*clientConn),
		dialing: make(map[string]*dialing),
	}
	t.wg.Add(1)
	go t.acceptLoop()
	t.logger.Info("gossip: peer transport listening", "addr", t.Addr(), "wrapped", cfg.Wrap != nil)
	return t, nil
}

// Addr returns the address the transport listens on, host:port. With an
// unspecified bind host (0.0.0.0) it is not an address peers can dial.
func (t *Transport) Addr() string {
	return t.ln.Addr().String()
}

// Close stops serving, closes every connection, cancels running handlers and
// waits for all the transport's goroutines. Calls in progress fail with
// ErrClosed. It is idempotent.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.closed = true
		conns := make([]net.Conn, 0, len(t.inbound)+len(t.clients))
		for in := range t.inbound {
			conns = append(conns, in.conn)
		}
		for c := range t.clients {
			conns = append(conns, c.conn)
		}
		t.mu.Unlock()
		t.ln.Close()
		t.cancel()
		for _, c := range conns {
			c.Close()
		}
		t.wg.Wait()
		t.refused.stop()
		t.stale.stop()
	})
	return nil
}

// Refused returns how many inbound connections the transport closed
// because they failed to prove themselves (a failed or unfinished
// handshake, no well-formed request within ProveTimeout), made room for
// newer ones beyond MaxUnprovenConns, or proved themselves beyond
// MaxConns. They are logged at most once per RefusalLogInterval, with
// counts by reason.
func (t *Transport) Refused() uint64 {
	return t.refused.Total()
}

// Dialed returns how many outbound connections the transport has opened
// since it started (each one a TCP connect and, with Wrap, a handshake).
func (t *Transport) Dialed() uint64 { return t.dialed.Load() }

// LateResponses returns how many responses came after their call had
// ended; each kept its connection, which was pooled again.
func (t *Transport) LateResponses() uint64 { return t.late.Load() }

// LateRequests returns how many requests came after their caller had
// given up (held by a cut link, for example, and delivered when it came
// back): each was answered with an error and not handled.
// They are logged at INFO, at most once per RefusalLogInterval with their
// count: a partition's heal delivers them in bursts.
func (t *Transport) LateRequests() uint64 { return t.stale.Total() }

// Accepted returns how many inbound connections the transport has accepted
// since it started, proven or not.
func (t *Transport) Accepted() uint64 { return t.accepts.Load() }

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// request and response are the msgpack maps inside the frames.
type request struct {
	Body []byte `msgpack:"b"`
	// Until is when the caller gives up, in milliseconds since its TCP
	// connect began, by its clock. The serving side counts from its
	// accept, which comes after the connect ends, so it never thinks the
	// caller gave up before it did (it may think so later, by the
	// connect's duration): a request that arrives after Until is not
	// handled (lateBy), and a handler's context ends at Until. Zero (from
	// an older release) means no bound but HandlerTimeout.
	Until uint64 `msgpack:"u,omitempty"`
}

// maxRequestFrame is the largest frame a request with a body of n bytes
// encodes to, whatever its Until stamp: a map of two entries (1 byte), the
// keys "b" and "u" (2 bytes each), the body's bin header (2, 3 or 5 bytes)
// and bytes, and the stamp (at most 9 bytes). Call checks it before it
// sends, so a request too large for a frame fails on every connection
// alike, without encoding the request twice.
func maxRequestFrame(n int) int {
	header := 5
	switch {
	case n <= math.MaxUint8:
		header = 2
	case n <= math.MaxUint16:
		header = 3
	}
	return 1 + 2 + header + n + 2 + 9
}

// maxConnAge retires a pooled connection this long after its connect, so
// that the allowance for clocks that run at different rates (lateBy) stays
// small: at most 300 ms.
const maxConnAge = 5 * time.Minute

// lateBy is how long after its caller gave up a request arrives on a
// connection accepted age ago, the caller having given up until
// milliseconds after its connect; zero or less when the caller still waits.
// It allows a thousandth of the connection's age for the two hosts' clocks
// to run apart, far more than clocks kept by NTP drift.
func lateBy(age time.Duration, until uint64) time.Duration {
	const far = uint64(math.MaxInt64 / int64(time.Millisecond) / 2) // ~146 years: no bound
	return age - time.Duration(min(until, far))*time.Millisecond - age/1000
}

// errLateRequest is the answer to a request that came late by d.
func errLateRequest(d time.Duration) error {
	return fmt.Errorf("request arrived %v after its caller gave up; not handled", d.Round(time.Millisecond))
}

type response struct {
	Body []byte `msgpack:"b"`
	Err  string `msgpack:"e"`
}

// encodeFrame encodes v and checks it fits in a frame.
func (t *Transport) encodeFrame(v any, what string) ([]byte, error) {
	b, err := wire.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("gossip: encode %s: %w", what, err)
	}
	if len(b) > t.cfg.MaxFrame {
		return nil, fmt.Errorf("gossip: %s of %d bytes exceeds the frame limit of %d: %w",
			what, len(b), t.cfg.MaxFrame, wire.ErrFrameTooLarge)
	}
	return b, nil
}
