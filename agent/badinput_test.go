package agent

import (
	"crypto/rand"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestGarbageToPortsKeepsServing sends random bytes, truncated frames and
// silent connections to an agent's gossip (TCP and UDP) and peer ports; the
// cluster keeps its leader, the agent keeps answering on its socket, and
// its goroutines do not grow.
func TestGarbageToPortsKeepsServing(t *testing.T) {
	c := newTestCluster(t)
	c.startN(3)
	epoch := c.waitLeader("n3", 15*time.Second)
	a := c.agents["n3"]
	before := runtime.NumGoroutine()
	targets := []string{a.GossipAddr(), a.peers.Addr()}
	for round := 0; round < 20; round++ {
		for _, addr := range targets {
			sendGarbage(t, "tcp", addr, round)
			sendGarbage(t, "udp", addr, round)
		}
	}
	var silent []net.Conn
	for i := 0; i < 20; i++ {
		if conn, err := net.Dial("tcp", a.peers.Addr()); err == nil {
			silent = append(silent, conn)
		}
	}
	if got := c.waitLeader("n3", 5*time.Second); got != epoch {
		t.Fatalf("leader epoch changed from %d to %d under garbage", epoch, got)
	}
	for _, conn := range silent {
		conn.Close()
	}
	eventually(t, 10*time.Second, func() error {
		if n := runtime.NumGoroutine(); n > before+10 {
			return fmt.Errorf("goroutines grew from %d to %d", before, n)
		}
		return nil
	})
}

// sendGarbage writes random bytes (for odd rounds, a frame header declaring
// a huge body, then a few bytes: a truncated frame) and hangs up.
func sendGarbage(t *testing.T, network, addr string, round int) {
	conn, err := net.DialTimeout(network, addr, time.Second)
	if err != nil {
		t.Fatalf("dial %s %s: %v", network, addr, err)
	}
	defer conn.Close()
	buf := make([]byte, 64+round*37)
	rand.Read(buf)
	if round%2 == 1 {
		copy(buf, []byte{0x00, 0x00, 0xff, 0xff})
	}
	_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = conn.Write(buf)
}

// TestDuplicateNameStopsOneAgent: a second agent that joins under a name
// the cluster already has is resolved by gossip: one of the two stops, with
// an error that says why, and the cluster keeps one leader.
func TestDuplicateNameStopsOneAgent(t *testing.T) {
	c := newTestCluster(t)
	c.startN(3)
	c.waitLeader("n3", 15*time.Second)
	cfg := c.config("n2", 2)
	cfg.Expect = 0
	cfg.DataDir += "-twin"
	cfg.SocketPath = filepath.Join(c.dir, "twin.sock")
	twin, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer twin.Halt()
	var stopped *Agent
	select {
	case <-twin.Done():
		stopped = twin
	case <-c.agents["n2"].Done():
		stopped = c.agents["n2"]
		delete(c.agents, "n2")
	case <-time.After(20 * time.Second):
		t.Fatal("both agents named n2 are still running after 20s")
	}
	if err := stopped.Err(); err == nil || !strings.Contains(err.Error(), "name") {
		t.Fatalf("the stopped agent says %v; want a reason naming the name conflict", err)
	}
}
