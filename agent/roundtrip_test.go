package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/internal/testlog"
	"github.com/tenurehq/tenure/leasing"
)

// TestRoundTripEstimate: the estimate follows RFC 6298's retransmission
// timeout: three times the first sample, close to a steady round trip,
// at once above one much slower answer, and forgotten roundTripMemory
// after the latest sample.
func TestRoundTripEstimate(t *testing.T) {
	const ms = time.Millisecond
	var r roundTrips
	now := time.Unix(1000, 0)
	if got := r.timeout(now); got != 0 {
		t.Fatalf("no samples: %v, want 0", got)
	}
	r.add(now, 100*ms)
	if got := r.timeout(now); got != 300*ms {
		t.Fatalf("one sample of 100ms: %v, want 300ms", got)
	}
	for range 50 {
		now = now.Add(time.Second)
		r.add(now, 100*ms)
	}
	if got := r.timeout(now); got < 100*ms || got > 110*ms {
		t.Fatalf("steady 100ms: %v, want about 100ms", got)
	}
	now = now.Add(time.Second)
	r.add(now, 1500*ms)
	if got := r.timeout(now); got < 1500*ms {
		t.Fatalf("after an answer that took 1.5s: %v, want at least that", got)
	}
	if got := r.timeout(now.Add(roundTripMemory - ms)); got < 1500*ms {
		t.Fatalf("just within the memory: %v, want it kept", got)
	}
	now = now.Add(roundTripMemory)
	if got := r.timeout(now); got != 0 {
		t.Fatalf("%v after the last sample: %v, want 0 (forgotten)", roundTripMemory, got)
	}
	r.add(now, 10*ms)
	if got := r.timeout(now); got != 30*ms {
		t.Fatalf("first sample after forgetting: %v, want 30ms (the old estimate gone)", got)
	}
}

// TestPeerWait: reach probes and acquire rounds wait the acquire budget, or
// the round-trip estimate when longer, at most the coordinator timeout and
// half of what a renewal interval leaves of the lease's validity.
func TestPeerWait(t *testing.T) {
	const ms = time.Millisecond
	lan := leasing.DefaultTiming().WithTTL(10 * time.Second)  // budget 1 s
	short := leasing.DefaultTiming().WithTTL(2 * time.Second) // budget 200 ms; (1.98 s - 667 ms)/2 = 657 ms
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name   string
		lease  leasing.Timing
		sample time.Duration // one answered call (estimate: three times it); 0 none
		want   time.Duration
	}{
		{"no estimate", lan, 0, time.Second},
		{"short estimate", lan, 100 * ms, time.Second},
		{"long estimate", lan, 500 * ms, 1500 * ms},
		{"capped by the coordinator timeout", lan, 2 * time.Second, 2 * time.Second},
		{"capped by the lease", short, time.Second, 657 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &core{cfg: coreConfig{Lease: tc.lease, Election: bully.DefaultConfig()}}
			if tc.sample > 0 {
				c.rtt.add(now, tc.sample)
			}
			if got := c.peerWait(now).Round(ms); got != tc.want {
				t.Fatalf("peerWait = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestOwnFreezeIsNoRoundTrip: a node frozen for 1-1.5 s (the leader, with
// renewals in flight, or the node next in line, with its queries) wakes
// with the round-trip estimate it had, give or take the samples since:
// the answers its kernel held through the freeze are not taken for slow
// peers. Counted, they raised the estimate to 1.4-3.8 s in 9 of the 100
// runs, leader's and watcher's (the simulation's round trips are 50-110
// ms).
func TestOwnFreezeIsNoRoundTrip(t *testing.T) {
	for i := range 100 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			s, name := roundTripRun(t, i)
			n := s.nodes[name]
			before := n.c.rtt.timeout(s.local(n, s.now))
			frozen := time.Second + time.Duration(s.rand.Int64N(int64(500*time.Millisecond)))
			n.paused = true
			s.run(frozen)
			n.paused = false
			wake := s.now
			for end := wake.Add(time.Second); s.now.Before(end); s.tick() {
				if got := n.c.rtt.timeout(s.local(n, s.now)); got > 600*time.Millisecond {
					t.Fatalf("%s's round-trip estimate %v after a freeze of %v: %v (before: %v)",
						name, s.now.Sub(wake), frozen, got, before)
				}
			}
		})
	}
}

// TestCutIsNoRoundTrip: after a cut of 1-1.5 s between one node (the
// leader, or the node next in line) and all others, gossip's and the peer
// transport's, every node keeps the round-trip estimate it had, give or
// take the samples since: the calls whose request or answer TCP
// retransmitted across the cut are not taken for slow peers (Karn's
// rule). Before, some node's estimate passed 600 ms in each run.
func TestCutIsNoRoundTrip(t *testing.T) {
	for i := range 100 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			s, name := roundTripRun(t, i)
			var others []string
			for _, o := range s.order {
				if o != name {
					others = append(others, o)
				}
			}
			cut := time.Second + time.Duration(s.rand.Int64N(int64(500*time.Millisecond)))
			s.partition([]string{name}, others)
			for _, o := range others {
				s.cutPeers(name, o, false)
			}
			s.run(cut)
			s.heal()
			healed := s.now
			for end := healed.Add(time.Second); s.now.Before(end); s.tick() {
				if n, got := slowEstimate(s, 600*time.Millisecond, ""); n != "" {
					t.Fatalf("%s's round-trip estimate %v after a cut of %s for %v: %v",
						n, s.now.Sub(healed), name, cut, got)
				}
			}
		})
	}
}

// slowEstimate returns a node of s other than except whose round-trip
// estimate is above limit now, and that estimate; "" when there is none.
func slowEstimate(s *csim, limit time.Duration, except string) (string, time.Duration) {
	for _, n := range s.nodes {
		if n.name == except {
			continue
		}
		if got := n.c.rtt.timeout(s.local(n, s.now)); got > limit {
			return n.name, got
		}
	}
	return "", 0
}

// roundTripRun is run i of a round-trip test: five nodes with a 2 s TTL
// that have led and renewed for three to four TTLs, and the node the run
// takes (a fault) to: the leader in even runs, the node next in line in
// odd ones. It fails t if some node's estimate is not yet the
// simulation's round trips (at most 300 ms).
func roundTripRun(t *testing.T, i int) (*csim, string) {
	t.Helper()
	s := newCsim(t, testlog.Seed(t))
	s.ttl = 2 * time.Second
	s.addNodes(5)
	l, _ := s.waitLeader(10 * time.Second)
	s.run(3*s.ttl + time.Duration(s.rand.Int64N(int64(s.ttl))))
	if n, before := slowEstimate(s, 300*time.Millisecond, ""); n != "" {
		t.Fatalf("%s's estimate before the fault: %v, want the simulation's round trips", n, before)
	}
	if i%2 == 1 {
		return s, s.watcher(l)
	}
	return s, l
}

// TestFrozenPeerIsNoRoundTrip: after one node (the leader, or the node
// next in line) was frozen for 1-1.5 s, the others keep the round-trip
// estimates they had, give or take the samples since: the answers to the
// calls its kernel held through the freeze tell of the freeze (the
// answer says how long ago the peer woke), not of slow peers.
func TestFrozenPeerIsNoRoundTrip(t *testing.T) {
	for i := range 100 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			s, name := roundTripRun(t, i)
			frozen := time.Second + time.Duration(s.rand.Int64N(int64(500*time.Millisecond)))
			s.nodes[name].paused = true
			s.run(frozen)
			s.nodes[name].paused = false
			wake := s.now
			for end := wake.Add(time.Second); s.now.Before(end); s.tick() {
				// name's own estimate: TestOwnFreezeIsNoRoundTrip
				if n, got := slowEstimate(s, 600*time.Millisecond, name); n != "" {
					t.Fatalf("%s's round-trip estimate %v after %s woke from a freeze of %v: %v",
						n, s.now.Sub(wake), name, frozen, got)
				}
			}
		})
	}
}
