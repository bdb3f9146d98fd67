package gossip

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"
)

// TestTagsDuringNameConflict starts a member under a name the cluster
// already has and changes both twins' tags all through serf's resolution
// of the conflict. Serf's resolver reads the local node's address while
// SetTags rewrites it, so under the race detector this test fails unless
// tag updates wait for the resolution. One twin stops, and the cluster
// ends up with the tags the other set last: none set during the
// resolution is lost.
func TestTagsDuringNameConflict(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	cfg := testConfig(t, 1) // a second n1
	cfg.Join = []string{nodes[0].LocalMember().Addr}
	twin := startNode(t, cfg)
	twins := []*node{nodes[1], twin}

	stop := make(chan struct{})
	last := make([]chan int, len(twins)) // the last value each twin set
	for i, tw := range twins {
		last[i] = make(chan int, 1)
		go func() {
			n := 0
			defer func() { last[i] <- n }()
			for next := 1; ; next++ {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				if err := tw.SetTags(map[string]string{"n": strconv.Itoa(next)}); err != nil {
					return // the twin that lost has stopped
				}
				n = next
			}
		}()
	}
	survivor := -1
	waitFor(t, 20*time.Second, "one twin to stop", func() bool {
		alive := []bool{nodes[1].serf.State() == serf.SerfAlive, twin.serf.State() == serf.SerfAlive}
		switch {
		case alive[0] && !alive[1]:
			survivor = 0
		case alive[1] && !alive[0]:
			survivor = 1
		}
		return survivor >= 0
	})
	if twins[0].conflict.started.Load()+twins[1].conflict.started.Load() == 0 {
		t.Fatal("neither twin's gate saw serf start resolving the conflict")
	}
	for _, tw := range twins {
		waitFor(t, 10*time.Second, "the gates to open (serf's end-of-resolution lines)", func() bool {
			shut, _, _ := tw.conflict.shut()
			return !shut
		})
	}
	time.Sleep(500 * time.Millisecond) // the survivor goes on setting tags
	close(stop)
	want := strconv.Itoa(<-last[survivor])
	addr := twins[survivor].LocalMember().Addr
	waitFor(t, 10*time.Second, "n0 to see the survivor's last tags", func() bool {
		for _, m := range nodes[0].Members() {
			if m.Name == "n1" {
				return m.Addr == addr && m.Tags["n"] == want
			}
		}
		return false
	})
}

// TestConflictGate: serf's start line shuts the gate for this node's alive
// messages only, every resolution started must end before it opens, and a
// resolution whose end is never logged holds it for the bound only.
func TestConflictGate(t *testing.T) {
	g := newConflictGate("n1", Timing{GossipInterval: 50 * time.Millisecond}, 128)
	if g.bound != 30*time.Second {
		t.Fatalf("bound %v, want the 30s floor", g.bound)
	}
	self := &memberlist.Node{Name: "n1"}
	other := &memberlist.Node{Name: "n2"}
	if g.NotifyAlive(self) != nil {
		t.Fatal("a new gate refuses this node's alive message")
	}
	start := "Node name conflicts with another node at 127.0.0.1:7946. Names must be unique! (Resolution enabled: true)"
	g.observe("serf", strings.Replace(start, "true", "false", 1)) // no resolver runs
	g.observe("memberlist", start)
	if g.NotifyAlive(self) != nil {
		t.Fatal("the gate shut on a line serf writes when no resolver runs, or on memberlist's")
	}
	g.observe("serf", start)
	g.observe("serf", start)
	if g.NotifyAlive(self) == nil || g.NotifyAlive(other) != nil {
		t.Fatal("a shut gate must refuse this node's alive messages and only those")
	}
	g.observe("serf", "majority in name conflict resolution [2 / 3]")
	if g.NotifyAlive(self) == nil {
		t.Fatal("the gate opened with one of two resolutions still running")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := g.wait(ctx); err == nil {
		t.Fatal("wait returned while the gate was shut")
	}
	opened := make(chan error, 1)
	go func() { opened <- g.wait(context.Background()) }()
	g.observe("serf", "Failed to start name resolution query: serf is shutting down")
	if err := <-opened; err != nil || g.NotifyAlive(self) != nil {
		t.Fatalf("the gate did not open when the last resolution ended (wait: %v)", err)
	}
	g.observe("serf", "minority in name conflict resolution, quiting [0 / 1]") // an end too many
	g.begin(time.Now().Add(-g.bound))                                          // started a bound ago, end never logged
	if g.NotifyAlive(self) != nil || g.started.Load() != 3 {
		t.Fatalf("the gate holds past its bound (or counted %d starts, want 3)", g.started.Load())
	}
}
