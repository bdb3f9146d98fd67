//go:build nemesis

package nemesis

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tenurehq/tenure/internal/netns"
	"github.com/tenurehq/tenure/internal/testlog"
)

// inHost runs f on a thread in h's network namespace, then puts the
// thread back in its own: the sockets f makes stay in h, wherever they are
// used later. (A thread left in h could be the process's main one, which
// Go never ends; the network's Close would then kill this process with
// h's.)
func inHost(t *testing.T, h netns.Host, f func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // unlocked only once back in its namespace; otherwise the thread ends with the goroutine
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		target, err := os.Open(filepath.Join("/run/netns", h.NS))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", h.NS, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("setns back from %s: %w", h.NS, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// delayCluster is a cluster of two hosts and no processes: enough to put
// on and take off a network fault.
func delayCluster(t *testing.T) (*Cluster, []netns.Host) {
	t.Helper()
	if err := DelayAvailable(); err != nil {
		t.Skip(err)
	}
	hosts := netns.HostsForTest(t, netOptions, 2)
	events, err := OpenEvents(filepath.Join(t.TempDir(), "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	log := testlog.New(t, "")
	c := &Cluster{cfg: Config{Logger: log}, events: events, delays: newDelayer(log)}
	for i, h := range hosts {
		c.nodes = append(c.nodes, &Node{Name: h.Label, ID: i + 1, Host: h})
	}
	t.Cleanup(func() {
		if err := errors.Join(c.delays.close(), events.Close()); err != nil {
			t.Error(err)
		}
	})
	return c, hosts
}

// TestDelayHoldsPacketsAndReordersThem: under a slow link every packet
// between the two hosts is held between half and one and a half times
// the delay, each way, and packets sent together overtake each other;
// once healed, packets pass at once again. Real sockets in the hosts'
// namespaces, at the hosts' own addresses.
func TestDelayHoldsPacketsAndReordersThem(t *testing.T) {
	c, hosts := delayCluster(t)
	h1, h2 := hosts[0], hosts[1]
	var ln net.Listener
	var udp net.PacketConn
	inHost(t, h2, func() (err error) {
		if ln, err = net.Listen("tcp", h2.Addr+":9000"); err != nil {
			return err
		}
		udp, err = net.ListenPacket("udp", h2.Addr+":9000")
		return err
	})
	defer ln.Close()
	defer udp.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	connect := func() time.Duration {
		t.Helper()
		var took time.Duration
		inHost(t, h1, func() error {
			start := time.Now()
			conn, err := net.DialTimeout("tcp", h2.Addr+":9000", 5*time.Second)
			took = time.Since(start)
			if err == nil {
				conn.Close()
			}
			return err
		})
		return took
	}
	if d := connect(); d > 100*time.Millisecond {
		t.Fatalf("connect before the fault took %v", d)
	}

	const delay = 300 * time.Millisecond
	if err := c.Partition(Slow([]string{"h1", "h2"}, "h1", delay)); err != nil {
		t.Fatal(err)
	}
	// A connect is a SYN one way and its SYN-ACK back: two held packets.
	if d := connect(); d < delay || d > 3*delay+time.Second {
		t.Errorf("connect under a delay of %v ±%v each way took %v", delay, delay/2, d)
	}

	// Datagrams sent at once arrive out of order.
	const count = 40
	send := func(n int) {
		t.Helper()
		inHost(t, h1, func() error {
			conn, err := net.Dial("udp", h2.Addr+":9000")
			if err != nil {
				return err
			}
			defer conn.Close()
			for i := range n {
				if _, err := conn.Write([]byte{byte(i)}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	receive := func(n int, within time.Duration) []int {
		t.Helper()
		var order []int
		udp.SetReadDeadline(time.Now().Add(within))
		buf := make([]byte, 16)
		for len(order) < n {
			m, _, err := udp.ReadFrom(buf)
			if err != nil {
				t.Fatalf("after %d of %d datagrams: %v", len(order), n, err)
			}
			if m == 1 {
				order = append(order, int(buf[0]))
			}
		}
		return order
	}
	send(count)
	if order := receive(count, 3*delay); slices.IsSorted(order) {
		t.Errorf("%d datagrams sent together under a delay of %v ±%v arrived in the order sent", count, delay, delay/2)
	}
	if held := c.delays.held.Load(); held < count+2 {
		t.Errorf("the delayer held %d packets, want at least %d", held, count+2)
	}

	// A heal lets what is held through at once, and the kernel drops
	// none of it.
	if err := c.Partition(Slow([]string{"h1", "h2"}, "h1", time.Minute)); err != nil {
		t.Fatal(err)
	}
	send(10)
	time.Sleep(100 * time.Millisecond) // all queued
	if err := c.HealNetwork(); err != nil {
		t.Fatal(err)
	}
	receive(10, time.Second)
	if d := connect(); d > 100*time.Millisecond {
		t.Errorf("connect after the heal took %v", d)
	}
	if lost := c.delays.lost.Load(); lost != 0 {
		t.Errorf("the kernel dropped %d held packets", lost)
	}
}
