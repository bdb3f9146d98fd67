//go:build linux

package rpc

import (
	"net"
	"syscall"
)

// peerOf returns the process at the other end of a Unix connection, from
// SO_PEERCRED: the process that connected, as of the connect.
func peerOf(nc net.Conn) Peer {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return Peer{}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}
	}
	var cred *syscall.Ucred
	ctlErr := raw.Control(func(fd uintptr) {
		cred, err = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if ctlErr != nil || err != nil || cred == nil {
		return Peer{}
	}
	return Peer{PID: int(cred.Pid), UID: int(cred.Uid), Known: true}
}
