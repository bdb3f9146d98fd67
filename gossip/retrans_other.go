//go:build !linux

package gossip

import "net"

// retransmits reports nothing where the kernel's count of a connection's
// retransmissions is not read: every answered call is then a round-trip
// sample.
func retransmits(net.Conn) (n uint32, ok bool) { return 0, false }
