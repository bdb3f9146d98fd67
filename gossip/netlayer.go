package gossip

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// netLayer is memberlist's own UDP+TCP transport with these changes:
//   - outbound stream connections are dialled with a context and cut when
//     the Membership shuts down, so a join to an unresponsive address cannot
//     hold Shutdown for TCPTimeout;
//   - inbound streams pass a streamGate, which bounds how many are open and
//     what memberlist reads from each (see screenStream);
//   - inbound packets larger than maxPacketBytes, or that would decompress
//     into more, are dropped (see screenPacket), and each packet memberlist
//     keeps holds only its own bytes rather than a 64 KiB read buffer;
//   - tests can cut links to chosen addresses (blocked).
type netLayer struct {
	*memberlist.NetTransport
	ctx context.Context // cancelled at Shutdown
	// blocked, when set, drops every packet and refuses every stream to the
	// gossip addresses for which it returns true. Only tests set it.
	blocked atomic.Pointer[func(addr string) bool]

	streams        *streamGate
	packets        chan *memberlist.Packet // screened, to memberlist
	packetsRefused *refusalLog
	stopping       chan struct{} // closed first at Shutdown: stop handing over
	done           chan struct{} // closed once memberlist's listeners stopped
	pumps          sync.WaitGroup
	shutdownOnce   sync.Once
	shutdownErr    error
}

var _ memberlist.NodeAwareTransport = (*netLayer)(nil)

// netLayerConfig configures newNetLayer.
type netLayerConfig struct {
	ip         string
	port       int // 0 picks a free port, the same for UDP and TCP
	std        *log.Logger
	logger     *slog.Logger
	maxMembers int
	maxStreams int
	tcpTimeout time.Duration
}

// newNetLayer binds ip:port and returns the transport with its actual port.
func newNetLayer(ctx context.Context, c netLayerConfig) (*netLayer, int, error) {
	nt, err := bindNetTransport(c.ip, c.port, c.std)
	if err != nil {
		return nil, 0, err
	}
	t := &netLayer{
		NetTransport:   nt,
		ctx:            ctx,
		packets:        make(chan *memberlist.Packet),
		packetsRefused: newRefusalLog(c.logger, "gossip: dropped gossip packets that no member sends (oversized or decompressing too far)"),
		stopping:       make(chan struct{}),
		done:           make(chan struct{}),
	}
	t.streams = &streamGate{
		max:      c.maxStreams,
		timeout:  min(c.tcpTimeout, maxScreenTimeout),
		limits:   limitsFor(c.maxMembers),
		out:      make(chan net.Conn),
		stopping: t.stopping,
		refused:  newRefusalLog(c.logger, "gossip: refused inbound gossip streams (over the limit, too slow, too large or malformed)"),
	}
	t.pumps.Add(2)
	go t.pumpStreams()
	go t.pumpPackets()
	return t, nt.GetAutoBindPort(), nil
}

// bindNetTransport binds memberlist's transport. With port 0 the kernel
// picks a TCP port that may be taken for UDP: it retries a few times, as
// memberlist itself does.
func bindNetTransport(ip string, port int, std *log.Logger) (*memberlist.NetTransport, error) {
	cfg := &memberlist.NetTransportConfig{BindAddrs: []string{ip}, BindPort: port, Logger: std}
	attempts := 1
	if port == 0 {
		attempts = 10
	}
	var err error
	for range attempts {
		var nt *memberlist.NetTransport
		if nt, err = memberlist.NewNetTransport(cfg); err == nil {
			return nt, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, fmt.Errorf("gossip: bind %s: %w", net.JoinHostPort(ip, fmt.Sprint(port)), err)
}

// StreamCh returns the inbound streams that passed the gate.
func (t *netLayer) StreamCh() <-chan net.Conn {
	return t.streams.out
}

// PacketCh returns the inbound packets that passed screenPacket.
func (t *netLayer) PacketCh() <-chan *memberlist.Packet {
	return t.packets
}

// pumpStreams takes every stream memberlist's listener accepts until its
// listener has stopped; once Shutdown began, it closes them.
func (t *netLayer) pumpStreams() {
	defer t.pumps.Done()
	for {
		select {
		case conn := <-t.NetTransport.StreamCh():
			if isClosed(t.stopping) {
				conn.Close()
				continue
			}
			t.streams.admit(conn)
		case <-t.done:
			return
		}
	}
}

// pumpPackets takes every packet memberlist's listener reads until its
// listener has stopped, and hands memberlist those screenPacket passes,
// each in a buffer of its own size.
func (t *netLayer) pumpPackets() {
	defer t.pumps.Done()
	for {
		select {
		case p := <-t.NetTransport.PacketCh():
			if err := screenPacket(p.Buf); err != nil {
				t.packetsRefused.note(screenReason(err), p.From.String(), err)
				continue
			}
			p.Buf = slices.Clone(p.Buf)
			select {
			case t.packets <- p:
			case <-t.stopping:
			}
		case <-t.done:
			return
		}
	}
}

// Shutdown stops memberlist's listeners, closes the streams being screened
// and waits for the pumps. It is idempotent.
func (t *netLayer) Shutdown() error {
	t.shutdownOnce.Do(func() {
		close(t.stopping)
		// The pumps keep draining the listeners, which block on unread
		// channels, until they have stopped.
		t.shutdownErr = t.NetTransport.Shutdown()
		close(t.done)
		t.pumps.Wait()
		t.streams.close()
		t.packetsRefused.stop()
	})
	return t.shutdownErr
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
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
