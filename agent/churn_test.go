package agent

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

var churnCycles = flag.Int("churn.cycles", 24, "short-lived nodes TestChurnLeavesNoResidue starts and stops")

// TestChurnLeavesNoResidue starts and stops short-lived nodes with names
// never seen before (an autoscaled fleet), half of them stopping
// gracefully and half crashing, next to three voters that stay, and checks
// what the voters carry afterwards: the same term, and no goroutines or
// file descriptors left over per departed node. The counts are the whole
// process's, and pooled peer connections (a goroutine and a descriptor
// each) come and go, so they may grow by a quarter of the nodes: a leak of
// one per crash or per leave grows them by half. Serf remembers departed
// members for a day (gossip.Timing's ReconnectTimeout and
// TombstoneTimeout), so the heap is logged, not checked.
func TestChurnLeavesNoResidue(t *testing.T) {
	c := newTestCluster(t)
	c.expect = 3
	for i := 1; i <= 3; i++ {
		c.start(c.config(fmt.Sprintf("n%d", i), uint64(1000+i)))
	}
	epoch := c.waitLeader("n3", 20*time.Second)
	leader := c.agents["n3"]
	settle := func() (goroutines, files int, heap uint64) {
		time.Sleep(3 * time.Second)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return runtime.NumGoroutine(), openFDs(t), ms.HeapAlloc
	}
	g0, f0, h0 := settle()
	for i := range *churnCycles {
		name := fmt.Sprintf("c%d", i)
		a := c.start(c.config(name, uint64(i+1)))
		eventually(t, 10*time.Second, func() error {
			for _, m := range leader.Members() {
				if m.Name == name && m.Status == rpc.MemberAlive {
					return nil
				}
			}
			return fmt.Errorf("the leader does not list %s alive", name)
		})
		if i%2 == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := a.Shutdown(ctx); err != nil {
				t.Errorf("shutdown %s: %v", name, err)
			}
			cancel()
			delete(c.agents, name)
		} else {
			c.halt(name)
		}
	}
	g1, f1, h1 := settle()
	t.Logf("%d nodes came and went: goroutines %d -> %d, open files %d -> %d, heap %d KiB -> %d KiB, the leader lists %d members",
		*churnCycles, g0, g1, f0, f1, h0>>10, h1>>10, len(leader.Members()))
	if slack := *churnCycles / 4; g1 > g0+slack || f1 > f0+slack {
		t.Errorf("after %d nodes came and went, goroutines grew from %d to %d and open files from %d to %d; at most %d more allowed",
			*churnCycles, g0, g1, f0, f1, slack)
	}
	if got, err := c.agreedLeader("n3"); err != nil || got != epoch {
		t.Errorf("after the churn: epoch %d (%v), want n3 still leading epoch %d", got, err, epoch)
	}
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("count open files: %v", err)
	}
	return len(ents)
}
