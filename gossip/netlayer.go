package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
)

// netLayer is tenure's gossip transport for memberlist: a UDP socket for
// packets and a TCP listener for streams on the same port, like
// memberlist's NetTransport, with these differences:
//   - each packet is read into one reused buffer and handed over in a
//     slice of its own size (memberlist's listener makes a fresh 64 KiB
//     buffer for every packet: while a 100-agent fleet started, clearing
//     and collecting those buffers was about a sixth of each agent's CPU);
//   - inbound packets larger than maxPacketBytes, or that would decompress
//     into more, are dropped (see screenPacket);
//   - inbound streams pass a streamGate, which bounds how many are open and
//     what memberlist reads from each (see screenStream);
//   - outbound stream connections are dialled with a context and cut when
//     the Membership shuts down, so a join to an unresponsive address cannot
//     hold Shutdown for TCPTimeout;
//   - an unspecified bind address (0.0.0.0, ::) is never advertised: the
//     caller must give the address to advertise;
//   - tests can cut links to chosen addresses (blocked).
type netLayer struct {
	tcp *net.TCPListener
	udp *net.UDPConn
	ctx context.Context // cancelled at Shutdown
	// blocked, when set, drops every packet (stream false) and refuses
	// every stream (stream true) to the gossip addresses for which it
	// returns true. Only tests set it.
	blocked atomic.Pointer[func(addr string, stream bool) bool]
	// watch maps the gossip addresses of members this node holds suspect,
	// failed or left to their names (heard.go); a packet from one of them puts
	// its name on heard, without waiting.
	watch  atomic.Pointer[map[netip.AddrPort]string]
	heard  chan string
	logger *slog.Logger

	streams        *streamGate
	packets        chan *memberlist.Packet // screened, to memberlist
	packetsRefused *refusalLog
	stopping       chan struct{} // closed first at Shutdown: stop handing over
	listeners      sync.WaitGroup
	shutdownOnce   sync.Once
	shutdownErr    error
}

var _ memberlist.NodeAwareTransport = (*netLayer)(nil)

// netLayerConfig configures newNetLayer.
type netLayerConfig struct {
	ip         string
	port       int // 0 picks a free port, the same for UDP and TCP
	logger     *slog.Logger
	maxMembers int
	maxStreams int
	tcpTimeout time.Duration
}

// udpReadBuffer is the socket receive buffer asked for (halved until the
// kernel accepts it), as memberlist asks: room for bursts of gossip while
// the reader waits for the CPU.
const udpReadBuffer = 2 << 20

// newNetLayer binds ip:port and returns the transport with its actual port.
func newNetLayer(ctx context.Context, c netLayerConfig) (*netLayer, int, error) {
	tcp, udp, err := bindGossip(c.ip, c.port)
	if err != nil {
		return nil, 0, err
	}
	t := &netLayer{
		tcp:            tcp,
		udp:            udp,
		ctx:            ctx,
		logger:         c.logger,
		packets:        make(chan *memberlist.Packet),
		heard:          make(chan string, heardBuffer),
		packetsRefused: newRefusalLog(c.logger, slog.LevelWarn, "gossip: dropped gossip packets that no member sends (oversized or decompressing too far)"),
		stopping:       make(chan struct{}),
	}
	t.streams = &streamGate{
		max:      c.maxStreams,
		timeout:  min(c.tcpTimeout, maxScreenTimeout),
		limits:   limitsFor(c.maxMembers),
		out:      make(chan net.Conn),
		stopping: t.stopping,
		refused:  newRefusalLog(c.logger, slog.LevelWarn, "gossip: refused inbound gossip streams (over the limit, too slow, too large or malformed)"),
	}
	t.listeners.Add(2)
	go t.acceptStreams()
	go t.readPackets()
	return t, tcp.Addr().(*net.TCPAddr).Port, nil
}

// bindGossip binds the TCP listener and the UDP socket on one port. With
// port 0 the kernel picks a TCP port that may be taken for UDP: it retries
// a few times, as memberlist itself does.
func bindGossip(ip string, port int) (*net.TCPListener, *net.UDPConn, error) {
	addr := net.ParseIP(ip)
	attempts := 1
	if port == 0 {
		attempts = 10
	}
	var err error
	for range attempts {
		var tcp *net.TCPListener
		if tcp, err = net.ListenTCP("tcp", &net.TCPAddr{IP: addr, Port: port}); err != nil {
			break
		}
		var udp *net.UDPConn
		bound := tcp.Addr().(*net.TCPAddr).Port
		if udp, err = net.ListenUDP("udp", &net.UDPAddr{IP: addr, Port: bound}); err == nil {
			for size := udpReadBuffer; size > 0; size /= 2 {
				if udp.SetReadBuffer(size) == nil {
					break
				}
			}
			return tcp, udp, nil
		}
		tcp.Close()
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	return nil, nil, fmt.Errorf("gossip: bind %s: %w", net.JoinHostPort(ip, fmt.Sprint(port)), err)
}

// FinalAdvertiseAddr is the address memberlist advertises: the one given,
// else the bound address, which must be a specific one.
func (t *netLayer) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip == "" {
		bound := t.tcp.Addr().(*net.TCPAddr)
		if bound.IP.IsUnspecified() {
			return nil, 0, fmt.Errorf("gossip: bound to %s, which others cannot reach: give the address to advertise", bound.IP)
		}
		ip, port = bound.IP.String(), bound.Port
	}
	addr := net.ParseIP(ip)
	if addr == nil {
		return nil, 0, fmt.Errorf("gossip: advertise address %q is not an IP address", ip)
	}
	if v4 := addr.To4(); v4 != nil {
		addr = v4
	}
	return addr, port, nil
}

// StreamCh returns the inbound streams that passed the gate.
func (t *netLayer) StreamCh() <-chan net.Conn {
	return t.streams.out
}

// PacketCh returns the inbound packets that passed screenPacket.
func (t *netLayer) PacketCh() <-chan *memberlist.Packet {
	return t.packets
}

// acceptStreams admits every stream the listener accepts until Shutdown
// closes it. A failing accept (out of descriptors) is retried after a
// pause that doubles up to a second.
func (t *netLayer) acceptStreams() {
	defer t.listeners.Done()
	var pause time.Duration
	for {
		conn, err := t.tcp.AcceptTCP()
		if err != nil {
			if isClosed(t.stopping) {
				return
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			t.logger.Error("gossip: accepting a stream failed", "err", err, "retry_in", pause)
			select {
			case <-time.After(pause):
			case <-t.stopping:
				return
			}
			continue
		}
		pause = 0
		if isClosed(t.stopping) {
			conn.Close()
			continue
		}
		t.streams.admit(conn)
	}
}

// readPackets reads every packet into one buffer and hands memberlist
// those screenPacket passes, each in a slice of its own size, until
// Shutdown closes the socket. The buffer holds one byte more than a packet
// may have, so a longer one shows as too large rather than cut short.
func (t *netLayer) readPackets() {
	defer t.listeners.Done()
	buf := make([]byte, maxPacketBytes+1)
	for {
		n, from, err := t.udp.ReadFromUDP(buf)
		now := time.Now()
		if err != nil {
			if isClosed(t.stopping) {
				return
			}
			t.logger.Debug("gossip: reading a packet failed", "err", err)
			continue
		}
		if n == 0 {
			continue
		}
		if err := screenPacket(buf[:n]); err != nil {
			t.packetsRefused.note(screenReason(err), from.String(), err)
			continue
		}
		t.noteHeard(from)
		select {
		case t.packets <- &memberlist.Packet{Buf: slices.Clone(buf[:n]), From: from, Timestamp: now}:
		case <-t.stopping:
			return
		}
	}
}

// noteHeard reports a packet from a watched address on heard; it drops
// the report when heard is full (a later packet reports it again).
func (t *netLayer) noteHeard(from *net.UDPAddr) {
	w := t.watch.Load()
	if w == nil || len(*w) == 0 {
		return
	}
	ap := from.AddrPort()
	if name, ok := (*w)[unmapAddrPort(ap)]; ok {
		select {
		case t.heard <- name:
		default:
		}
	}
}

// Shutdown closes the listeners, waits for their goroutines and closes
// the streams being screened. It is idempotent.
func (t *netLayer) Shutdown() error {
	t.shutdownOnce.Do(func() {
		close(t.stopping)
		t.shutdownErr = errors.Join(t.tcp.Close(), t.udp.Close())
		t.listeners.Wait()
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

func (t *netLayer) isBlocked(addr string, stream bool) bool {
	f := t.blocked.Load()
	return f != nil && (*f)(addr, stream)
}

// WriteTo sends a packet unless the link is blocked.
func (t *netLayer) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress sends a packet unless the link is blocked. Members
// advertise IP addresses, so a.Addr is most often "ip:port"; a host name
// is resolved.
func (t *netLayer) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.isBlocked(a.Addr, false) {
		return time.Now(), nil // a dropped packet looks sent
	}
	if to, err := netip.ParseAddrPort(a.Addr); err == nil {
		_, err = t.udp.WriteToUDPAddrPort(b, unmapAddrPort(to))
		return time.Now(), err
	}
	to, err := net.ResolveUDPAddr("udp", a.Addr)
	if err != nil {
		return time.Time{}, fmt.Errorf("gossip: send a packet to %s: %w", a.Addr, err)
	}
	_, err = t.udp.WriteToUDP(b, to)
	return time.Now(), err
}

// DialTimeout dials a stream connection.
func (t *netLayer) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout dials a stream connection that is closed when the
// Membership shuts down.
func (t *netLayer) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.isBlocked(a.Addr, true) {
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
