package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// TestFiveAgentsFailoverAndPreempt is the skeleton's end-to-end story: five
// agents agree on the highest node and one epoch; killing it elects the next
// with a higher epoch; restarting it with the same data dir makes it leader
// again (preemption) with a still higher epoch.
func TestFiveAgentsFailoverAndPreempt(t *testing.T) {
	c := newTestCluster(t)
	c.startN(5)
	first := c.waitLeader("n5", 15*time.Second)

	cfg := c.agents["n5"].cfg
	cfg.BindAddr = c.agents["n5"].GossipAddr() // restart on the same address
	c.halt("n5")
	killed := time.Now()
	second := c.waitLeader("n4", 15*time.Second)
	if second <= first {
		t.Fatalf("epoch after failover = %d, want > %d", second, first)
	}
	// The old leader renewed at most TTL/3 before it died, and voters keep
	// a promise for a TTL from then: no new lease can start sooner.
	if took := time.Since(killed); took < testTTL*2/3 {
		t.Fatalf("new leader after %v: before the old promises could expire", took)
	} else {
		t.Logf("new leader %v after kill -9 (TTL %v)", took, testTTL)
	}

	cfg.Join = nil // the snapshot in its data dir brings it back
	c.start(cfg)
	third := c.waitLeader("n5", 20*time.Second)
	if third <= second {
		t.Fatalf("epoch after preemption = %d, want > %d", third, second)
	}
}

func TestGracefulShutdownHandsOverQuickly(t *testing.T) {
	c := newTestCluster(t)
	c.startN(3)
	first := c.waitLeader("n3", 15*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := c.agents["n3"].Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	delete(c.agents, "n3")
	second := c.waitLeader("n2", 5*time.Second)
	if second <= first {
		t.Fatalf("epoch after hand-over = %d, want > %d", second, first)
	}
	t.Logf("graceful hand-over took %v (TTL %v)", time.Since(start), testTTL)
}

func TestResignOverSocket(t *testing.T) {
	c := newTestCluster(t)
	c.startN(3)
	first := c.waitLeader("n3", 15*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	follower, err := rpc.Dial(ctx, c.agents["n1"].SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()
	if err := follower.Resign(ctx); !errors.Is(err, rpc.ErrNotLeader) {
		t.Fatalf("follower resign = %v, want ErrNotLeader", err)
	}
	leader, err := rpc.Dial(ctx, c.agents["n3"].SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close()
	start := time.Now()
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if second := c.waitLeader("n2", 3*time.Second); second <= first {
		t.Fatalf("epoch after resign = %d, want > %d", second, first)
	}
	t.Logf("resign hand-over seen on every node after %v (TTL %v)", time.Since(start), testTTL)
}

func TestWatchSeesLeadershipChanges(t *testing.T) {
	c := newTestCluster(t)
	c.startN(3)
	c.waitLeader("n3", 15*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, c.agents["n2"].SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	w, err := cl.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ev, err := w.Next(ctx)
	if err != nil || ev.Event != rpc.EventLeaderChanged || ev.Leader == nil || ev.Leader.Node != "n3" {
		t.Fatalf("first event = %+v, %v; want the current leader n3", ev, err)
	}
	c.halt("n3")
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		if ev.Event == rpc.EventBecameLeader {
			if ev.Leader == nil || ev.Leader.Node != "n2" {
				t.Fatalf("became-leader names %+v, want n2", ev.Leader)
			}
			return
		}
	}
}

func TestEpochPersistsAcrossRestart(t *testing.T) {
	c := newTestCluster(t)
	c.startN(1) // --expect 1: a single-voter cluster
	first := c.waitLeader("n1", 10*time.Second)
	cfg := c.agents["n1"].cfg
	c.halt("n1")
	c.seed = ""
	c.start(cfg)
	if second := c.waitLeader("n1", 10*time.Second); second <= first {
		t.Fatalf("epoch after restart = %d, want > %d", second, first)
	}
}

func TestStartRefusesCorruptEpoch(t *testing.T) {
	c := newTestCluster(t)
	cfg := c.config("n1", 1)
	if err := writeFile(cfg.DataDir, "epoch", "tenure-epoch v1\nepoch 9\ncrc32 deadbeef\n"); err != nil {
		t.Fatal(err)
	}
	_, err := Start(cfg)
	if err == nil || !containsAll(err.Error(), "corrupt", "epoch") {
		t.Fatalf("start = %v, want a corrupt-epoch error", err)
	}
}

func TestDefaultClockAdvances(t *testing.T) {
	c := DefaultClock()
	a := c.Now()
	time.Sleep(10 * time.Millisecond)
	if d := c.Now().Sub(a); d < 10*time.Millisecond || d > time.Second {
		t.Fatalf("clock advanced %v over a 10ms sleep", d)
	}
}

// TestSlowWatcherIsCutOff: a watcher that stops reading is dropped with
// ErrTooSlow once it falls more than the buffer behind, while the agent
// goes on publishing.
func TestSlowWatcherIsCutOff(t *testing.T) {
	b := newBroadcaster()
	ch, cancel := b.subscribe(func() rpc.Event { return rpc.Event{Event: rpc.EventNoLeader} })
	defer cancel()
	for i := 0; i < subscriberBuffer+10; i++ {
		b.publish(rpc.Event{Event: rpc.EventMemberJoin})
	}
	n := 0
	for range ch {
		n++
	}
	if n != subscriberBuffer+1 {
		t.Fatalf("slow watcher got %d events before its channel closed, want %d", n, subscriberBuffer+1)
	}
}
