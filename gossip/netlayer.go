package gossip

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// netLayer is memberlist's own UDP+TCP transport with two changes: outbound
// stream connections are dialled with a context and cut when the Membership
// shuts down, so a join to an unresponsive address cannot hold Shutdown for
// TCPTimeout; and tests can cut links to chosen addresses (blocked).
type netLayer struct {
	*memberlist.NetTransport
	ctx context.Context // cancelled at Shutdown
	// blocked, when set, drops every packet and refuses every stream to the
	// gossip addresses for which it returns true. Only tests set it.
	blocked atomic.Pointer[func(addr string) bool]
}

var _ memberlist.NodeAwareTransport = (*netLayer)(nil)

// newNetLayer binds ip:port (port 0 picks a free port, the same for UDP and
// TCP) and returns the transport with its actual port.
func newNetLayer(ctx context.Context, ip string, port int, logger *log.Logger) (*netLayer, int, error) {
	cfg := &memberlist.NetTransportConfig{BindAddrs: []string{ip}, BindPort: port, Logger: logger}
	// With port 0 the kernel picks a TCP port that may be taken for UDP:
	// retry a few times, as memberlist itself does.
	attempts := 1
	if port == 0 {
		attempts = 10
	}
	var err error
	for range attempts {
		var nt *memberlist.NetTransport
		if nt, err = memberlist.NewNetTransport(cfg); err == nil {
			return &netLayer{NetTransport: nt, ctx: ctx}, nt.GetAutoBindPort(), nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, 0, fmt.Errorf("gossip: bind %s: %w", net.JoinHostPort(ip, fmt.Sprint(port)), err)
}

var errBlocked = errors.New("gossip: link blocked")

func (t *netLayer) isBlocked(addr string) bool {
	f := t.blocked.Load()
	return f != nil && (*f)(addr)
}

// WriteTo sends a packet unless the link is blocked.
func (t *netLayer) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress sends a packet unless the link is blocked.
func (t *netLayer) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.isBlocked(a.Addr) {
		return time.Now(), nil // a dropped packet looks sent
	}
	return t.NetTransport.WriteToAddress(b, a)
}

// DialTimeout dials a stream connection.
func (t *netLayer) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout dials a stream connection that is closed when the
// Membership shuts down.
func (t *netLayer) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.isBlocked(a.Addr) {
		return nil, fmt.Errorf("dial %s: %w", a.Addr, errBlocked)
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(t.ctx, "tcp", a.Addr)
	if err != nil {
		return nil, err
	}
	return &cancelConn{Conn: conn, stop: context.AfterFunc(t.ctx, func() { conn.Close() })}, nil
}

// cancelConn is a connection that its context closes.
type cancelConn struct {
	net.Conn
	stop func() bool
}

func (c *cancelConn) Close() error {
	c.stop()
	return c.Conn.Close()
}
