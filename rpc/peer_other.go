//go:build !linux

package rpc

import "net"

// peerOf cannot tell the peer here: no SO_PEERCRED. Such connections are
// not held to the per-peer share, and runners cannot register groups.
func peerOf(net.Conn) Peer { return Peer{} }
