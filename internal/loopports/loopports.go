// Package loopports finds free port ranges on 127.0.0.1 for runs that
// start many agents with fixed ports (the scale run, the benchmark
// suite): an agent's gossip port needs TCP and UDP, its peer port TCP.
package loopports

import (
	"fmt"
	"net"
)

// Free reports whether ports base to base+count-1 on 127.0.0.1 are free
// for both TCP and UDP right now.
func Free(base, count int) bool {
	for p := base; p < base+count; p++ {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		l.Close()
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		u.Close()
	}
	return true
}
