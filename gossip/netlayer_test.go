package gossip

import (
	"encoding/binary"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// totalAlloc returns the bytes allocated by the process so far.
func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// heapPeak samples the heap in use until stop is called, and returns the
// peak above the heap in use at the start (after a GC).
func heapPeak() (stop func() uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapInuse, ms.HeapInuse
	done, out := make(chan struct{}), make(chan uint64)
	go func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-done:
				out <- peak - base
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 { close(done); return <-out }
}

// joinNew starts a member that joins nd, and waits until both see each other
// alive: gossip still works.
func joinNew(t *testing.T, nd *node, i int, mod func(*Config)) {
	t.Helper()
	cfg := testConfig(t, i)
	cfg.Join = []string{nd.LocalMember().Addr}
	if mod != nil {
		mod(&cfg)
	}
	other := startNode(t, cfg)
	waitStatus(t, 10*time.Second, nd, []*node{other}, StatusAlive)
	waitStatus(t, 10*time.Second, other, []*node{nd}, StatusAlive)
}

// TestLyingPushPullHeaderIsRefused is the attack of a 26-byte push-pull
// header claiming a million members, on 16 connections (memberlist
// allocated about 115 MB for each): the gate closes each connection after
// its header, allocating next to nothing, and members still join.
func TestLyingPushPullHeaderIsRefused(t *testing.T) {
	nd := startNode(t, testConfig(t, 0))
	addr := nd.LocalMember().Addr
	stop := heapPeak()
	before := totalAlloc()
	for i := range 16 {
		if c := rawConn(t, addr, lyingHeader(t)); !closedByPeer(c) {
			t.Fatalf("connection %d with a lying header still open", i)
		}
	}
	allocated, peak := totalAlloc()-before, stop()
	t.Logf("16 lying headers: %d KiB allocated, heap peak +%d KiB", allocated>>10, peak>>10)
	if allocated > 16<<20 {
		t.Fatalf("16 lying headers allocated %d MiB", allocated>>20)
	}
	// The refusal is counted just after the connection is closed.
	waitFor(t, 2*time.Second, "16 refused streams", func() bool { return nd.net.streams.refused.Total() >= 16 })
	if got := nd.net.streams.refused.Total(); got != 16 {
		t.Errorf("%d streams refused, want 16", got)
	}
	joinNew(t, nd, 1, nil)
}

// TestEncryptedStreamFloodIsBounded is the attack of streams claiming 20 MB
// of encrypted state, which memberlist buffered whole before decrypting:
// claims beyond what a cluster needs are refused on the header, and streams
// of the largest size accepted cost a bounded amount; keyed members still
// join.
func TestEncryptedStreamFloodIsBounded(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	keyed := func(c *Config) { c.EncryptKey = key }
	cfg := testConfig(t, 0)
	keyed(&cfg)
	nd := startNode(t, cfg)
	addr := nd.LocalMember().Addr
	largest := nd.net.streams.limits.streamBytes - 5
	junk := make([]byte, 20<<20)
	stop := heapPeak()
	before := totalAlloc()
	var writers sync.WaitGroup
	for i := range 16 {
		size := 20 << 20
		if i%2 == 1 {
			size = largest
		}
		c := rawConn(t, addr, binary.BigEndian.AppendUint32([]byte{mlEncrypt}, uint32(size)))
		writers.Go(func() { c.Write(junk[:size]) })
		if !closedByPeer(c) {
			t.Fatalf("stream %d claiming %d encrypted bytes still open", i, size)
		}
		c.Close()
	}
	writers.Wait()
	allocated, peak := totalAlloc()-before, stop()
	t.Logf("16 encrypted streams (8 of 20 MiB, 8 of %d KiB): %d KiB allocated, heap peak +%d KiB",
		largest>>10, allocated>>10, peak>>10)
	if allocated > 32<<20 {
		t.Fatalf("16 encrypted streams allocated %d MiB", allocated>>20)
	}
	joinNew(t, nd, 1, keyed)
}

// TestSlowStreamsCannotLockMembersOut opens four times MaxInboundStreams
// connections that send one byte and stall: at most MaxInboundStreams are
// held, each newcomer closing the oldest unproven one, a member joins while
// they are open, the stragglers are closed after the screen timeout, and
// the refusals make one log line.
func TestSlowStreamsCannotLockMembersOut(t *testing.T) {
	cfg := testConfig(t, 0)
	logger, counts := testLogger(t, "refused inbound gossip streams")
	cfg.Logger = logger
	cfg.MaxInboundStreams = 16
	nd := startNode(t, cfg)
	gate := nd.net.streams
	var slow []net.Conn
	for range 64 {
		slow = append(slow, rawConn(t, nd.LocalMember().Addr, []byte{mlPushPull}))
	}
	waitFor(t, 2*time.Second, "48 slow streams to be evicted", func() bool { return gate.refused.Total() >= 48 })
	gate.mu.Lock()
	open := gate.open
	gate.mu.Unlock()
	if open > 16 {
		t.Fatalf("%d streams open, limit 16", open)
	}
	joinNew(t, nd, 1, nil)
	for i, c := range slow {
		if !closedByPeer(c) && !closedByPeer(c) {
			t.Fatalf("slow stream %d still open after 2 s (screen timeout %v)", i, gate.timeout)
		}
	}
	if n := counts["refused inbound gossip streams"].Load(); n != 1 {
		t.Errorf("%d refusal lines for %d refusals, want 1", n, gate.refused.Total())
	}
}

// TestCompressedPacketBombsAreDropped: a 6 KiB packet that decompresses
// into 8 MiB made memberlist inflate it (up to 40 MB per packet); the
// packet screen drops it after 8 KiB of output.
func TestCompressedPacketBombsAreDropped(t *testing.T) {
	nd := startNode(t, testConfig(t, 0))
	bomb := compressMsg(t, make([]byte, 8<<20))
	if len(bomb) > maxPacketBytes {
		t.Fatalf("bomb of %d bytes does not fit a packet", len(bomb))
	}
	conn, err := net.Dial("udp", nd.LocalMember().Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	refused := nd.net.packetsRefused
	before := totalAlloc()
	for batch := range 10 {
		for range 20 {
			conn.Write(bomb)
		}
		want := uint64(20 * (batch + 1))
		waitFor(t, 5*time.Second, "the bombs to be dropped", func() bool { return refused.Total() >= want })
	}
	allocated := totalAlloc() - before
	t.Logf("200 packet bombs of %d bytes: %d KiB allocated", len(bomb), allocated>>10)
	if allocated > 64<<20 {
		t.Fatalf("200 packet bombs allocated %d MiB", allocated>>20)
	}
	joinNew(t, nd, 1, nil)
}

// TestPacketsCostTheirSize: each packet is read into one reused buffer and
// kept in a slice of its own size. memberlist's own listener made a fresh
// 64 KiB buffer for every packet, which made the garbage collector run
// several times a second on every agent of a fleet that was starting. A
// packet longer than maxPacketBytes is dropped, not cut short.
func TestPacketsCostTheirSize(t *testing.T) {
	nd := startNode(t, testConfig(t, 0))
	addr := nd.LocalMember().Addr
	udpBarrier(t, addr, nd.cfg.Name)
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ping := append([]byte{mlPing}, mp(t, &pingBody{SeqNo: 7, Node: nd.cfg.Name})...)
	const packets = 2000
	before := totalAlloc()
	for i := range packets {
		conn.Write(ping)
		if i%100 == 99 {
			udpBarrier(t, addr, nd.cfg.Name) // the socket buffer never overflows
		}
	}
	perPacket := (totalAlloc() - before) / packets
	t.Logf("%d pings of %d bytes: %d bytes allocated per packet", packets, len(ping), perPacket)
	if perPacket > 8<<10 {
		t.Errorf("%d bytes allocated per %d-byte packet, want well under the 64 KiB a fresh read buffer costs", perPacket, len(ping))
	}

	long := append([]byte{mlCompound, 1, 0x20, 0}, make([]byte, maxPacketBytes)...)
	refused := nd.net.packetsRefused.Total()
	conn.Write(long)
	waitFor(t, 5*time.Second, "the long packet to be dropped", func() bool { return nd.net.packetsRefused.Total() > refused })
}

// TestClusterTrafficPassesTheScreens: everything members send each other
// (joins, push-pulls, probes, with and without a key) passes the screens.
func TestClusterTrafficPassesTheScreens(t *testing.T) {
	for _, key := range [][]byte{nil, []byte("0123456789abcdef0123456789abcdef")} {
		nodes := startCluster(t, 3, func(_ int, c *Config) { c.EncryptKey = key })
		first := nodes[0].net.streams
		// The two joins are push-pulls to nodes[0]; periodic ones go to a
		// random member, so they may or may not reach it.
		waitFor(t, 10*time.Second, "the joins' push-pulls", func() bool {
			first.mu.Lock()
			defer first.mu.Unlock()
			return first.passed >= 2
		})
		for _, nd := range nodes {
			if s, p := nd.net.streams.refused.Total(), nd.net.packetsRefused.Total(); s+p > 0 {
				t.Errorf("encrypted=%v: %s refused %d streams and %d packets of its own cluster", key != nil, nd.cfg.Name, s, p)
			}
		}
		for _, nd := range nodes {
			nd.Shutdown()
		}
	}
}

// udpBarrier sends a memberlist ping to addr from its own socket and waits
// for the ack: memberlist handles packets in order, one at a time, so every
// packet sent before has been handled.
func udpBarrier(t *testing.T, addr, name string) {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ping := append([]byte{mlPing}, mp(t, &pingBody{SeqNo: 42, Node: name})...)
	buf := make([]byte, 1500)
	for range 50 {
		c.Write(ping)
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, err := c.Read(buf); err == nil && n > 0 {
			return
		}
	}
	t.Fatal("no ack from memberlist")
}
