package gossip

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// retransmits is the number of segments the kernel has retransmitted on
// conn's TCP connection, its SYN included (TCP_INFO's total_retrans); ok
// is false when conn is no TCP socket or the kernel does not say.
func retransmits(conn net.Conn) (n uint32, ok bool) {
	sc, isSys := conn.(syscall.Conn)
	if !isSys {
		return 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	cerr := raw.Control(func(fd uintptr) {
		info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	})
	if cerr != nil || err != nil {
		return 0, false
	}
	return info.Total_retrans, true
}
