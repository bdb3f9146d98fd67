package agent

import (
	"bytes"
	"compress/lzw"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
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

// TestFloodsKeepMemoryBoundedAndLeader runs, all at once against the leader
// of a cluster with a key and of one without (on loopback), the floods of
// the attack review, each holding its connections open: push-pull headers
// claiming a million members, streams sending 20 MB of encrypted state,
// streams that stall after a byte, junk and compression-bomb packets, and
// idle connections to the peer port. The heap stays within 64 MiB of its
// size before, and the leader keeps its term.
func TestFloodsKeepMemoryBoundedAndLeader(t *testing.T) {
	for _, keyed := range []bool{true, false} {
		t.Run(map[bool]string{true: "keyed", false: "keyless"}[keyed], func(t *testing.T) {
			c := newTestCluster(t)
			key := newKey(t)
			c.expect = 3
			for i := 1; i <= 3; i++ {
				cfg := c.config(fmt.Sprintf("n%d", i), uint64(i))
				if keyed {
					cfg.EncryptKey = key
				}
				c.start(cfg)
			}
			epoch := c.waitLeader("n3", 15*time.Second)
			grew, rss := flood(c.agents["n3"], 4*time.Second)
			t.Logf("heap in use grew by at most %d MiB under the floods; RSS %d MiB → %d MiB", grew>>20, rss[0]>>20, rss[1]>>20)
			if grew > 64<<20 {
				t.Errorf("heap in use grew by %d MiB under the floods, bound 64 MiB", grew>>20)
			}
			if got := c.waitLeader("n3", 10*time.Second); got != epoch {
				t.Fatalf("leader epoch changed from %d to %d under the floods", epoch, got)
			}
		})
	}
}

// flood runs every flood against a for d and returns the peak growth of
// the heap in use, and the RSS before and after.
func flood(a *Agent, d time.Duration) (uint64, [2]uint64) {
	stop := sampleHeap()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	gossip, peer := a.GossipAddr(), a.peers.Addr()
	var floods sync.WaitGroup
	floods.Go(func() { hold(ctx, 16, func() net.Conn { return dialWrite("tcp", gossip, lyingHeader()) }) })
	floods.Go(func() { hold(ctx, 8, func() net.Conn { return sendEncrypted(gossip, 20<<20) }) })
	floods.Go(func() { hold(ctx, 200, func() net.Conn { return dialWrite("tcp", gossip, []byte{6}) }) })
	floods.Go(func() { hold(ctx, 300, func() net.Conn { return dialWrite("tcp", peer, nil) }) })
	floods.Go(func() { floodPackets(ctx, gossip) })
	floods.Wait()
	return stop()
}

// sampleHeap samples the heap in use until the returned function is
// called, which returns the peak above the start and the RSS at the start
// and the end.
func sampleHeap() func() (uint64, [2]uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak, rss0 := ms.HeapInuse, ms.HeapInuse, readRSS()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	return func() (uint64, [2]uint64) {
		close(done)
		wg.Wait()
		return peak - base, [2]uint64{rss0, readRSS()}
	}
}

// readRSS returns the resident set size on Linux, 0 elsewhere.
func readRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// hold keeps n connections made by open open, making them anew every half
// second, until ctx ends.
func hold(ctx context.Context, n int, open func() net.Conn) {
	for ctx.Err() == nil {
		conns := make([]net.Conn, 0, n)
		for range n {
			if c := open(); c != nil {
				conns = append(conns, c)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
		for _, c := range conns {
			c.Close()
		}
	}
}

// dialWrite dials addr, writes b and returns the connection (nil if the
// dial failed).
func dialWrite(network, addr string, b []byte) net.Conn {
	conn, err := net.DialTimeout(network, addr, time.Second)
	if err != nil {
		return nil
	}
	conn.SetWriteDeadline(time.Now().Add(time.Second))
	conn.Write(b)
	return conn
}

// lyingHeader is a push-pull header claiming a million members: fixmap
// {Nodes: 1<<20, UserStateLen: 0, Join: false}.
func lyingHeader() []byte {
	h := append([]byte{6, 0x83, 0xa5}, "Nodes"...)
	h = append(append(h, 0xce, 0, 0x10, 0, 0, 0xac), "UserStateLen"...)
	h = append(append(h, 0, 0xa4), "Join"...)
	return append(h, 0xc2)
}

// encryptedJunk is the body of sendEncrypted's streams.
var encryptedJunk = make([]byte, 20<<20)

// sendEncrypted opens a stream announcing n bytes of encrypted state and
// sends them (as far as the agent reads).
func sendEncrypted(addr string, n int) net.Conn {
	conn := dialWrite("tcp", addr, binary.BigEndian.AppendUint32([]byte{10}, uint32(n)))
	if conn != nil {
		conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
		conn.Write(encryptedJunk[:n])
	}
	return conn
}

// floodPackets sends junk packets and compressed packets that would
// inflate into 8 MiB (LZW of zeros, wrapped as memberlist's compress
// message {Algo: 0, Buf: ...}) until ctx ends.
func floodPackets(ctx context.Context, addr string) {
	var z bytes.Buffer
	w := lzw.NewWriter(&z, lzw.LSB, 8)
	w.Write(make([]byte, 8<<20))
	w.Close()
	bomb := append([]byte{9, 0x82, 0xa4}, "Algo"...)
	bomb = append(append(bomb, 0, 0xa3), "Buf"...)
	bomb = append(binary.BigEndian.AppendUint16(append(bomb, 0xda), uint16(z.Len())), z.Bytes()...)
	conn, err := net.Dial("udp", addr)
	if err != nil {
		return
	}
	defer conn.Close()
	junk := make([]byte, 64)
	for ctx.Err() == nil {
		rand.Read(junk)
		conn.Write(junk)
		conn.Write(bomb)
		time.Sleep(100 * time.Microsecond) // a flood, not a kernel buffer overflow
	}
}
