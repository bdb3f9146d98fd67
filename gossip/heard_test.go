package gossip

import (
	"slices"
	"testing"
	"time"
)

// healTiming is LocalTiming with the LAN profile's slow paths back, and
// slower (full state syncs every 30 s, gossip to failed members for 30 s,
// reconnects every 30 s as serf's default has them), and a suspicion of
// 3 s (with four members memberlist waits for no confirmations: the
// suspicion lasts exactly that).
func healTiming() Timing {
	t := LocalTiming()
	t.SuspicionMult = 15
	t.PushPullInterval = 30 * time.Second
	t.ReconnectInterval = 30 * time.Second
	t.GossipToTheDeadTime = 30 * time.Second
	return t
}

// TestHeardMemberIsNotFailedAfterTheHeal: for a second b and c can send
// nothing to a and d, while a and d still reach them (one way: but no TCP
// connection, which needs both), long enough for a and d to suspect b and
// c (a probe round is 0.6 s), not for the suspicion to run out (3 s). b
// and c read the suspicion on a's probes and refute it, but their
// refutations are lost, and once the link heals a's probes carry the
// suspicion of an older incarnation, which b and c ignore: nothing in
// memberlist tells a before its suspicion runs out, and it would declare
// b and c failed after the heal (the fault harness saw it 4 and 21 s
// after a one-way partition healed, with the LAN profile, and the
// members back only 29 s after the heal). A member that hears packets
// from a member it holds suspect exchanges state with it, and learns of
// the refutation: no member may report another failed.
func TestHeardMemberIsNotFailedAfterTheHeal(t *testing.T) {
	tm := healTiming()
	nodes := startCluster(t, 4, func(_ int, c *Config) { c.Timing = tm })
	a, b, c, d := nodes[0], nodes[1], nodes[2], nodes[3]
	failed := func() []string {
		var out []string
		for _, nd := range nodes {
			nd.rec.mu.Lock()
			for _, e := range nd.rec.events {
				if e.Type == EventFailed {
					out = append(out, nd.cfg.Name+" reported "+e.Member.Name+" failed")
				}
			}
			nd.rec.mu.Unlock()
		}
		return slices.Compact(slices.Sorted(slices.Values(out)))
	}
	y := map[string]bool{a.LocalMember().Addr: true, d.LocalMember().Addr: true}
	x := map[string]bool{b.LocalMember().Addr: true, c.LocalMember().Addr: true}
	toY := func(addr string, _ bool) bool { return y[addr] }
	dialX := func(addr string, stream bool) bool { return stream && x[addr] }
	b.net.blocked.Store(&toY)
	c.net.blocked.Store(&toY)
	a.net.blocked.Store(&dialX)
	d.net.blocked.Store(&dialX)
	time.Sleep(time.Second)
	if f := failed(); len(f) > 0 {
		t.Fatalf("failed before the heal, within a second of a 3 s suspicion (the machine stalled?): %v", f)
	}
	heal(nodes)
	lo, _ := tm.SuspicionTimeout(len(nodes))
	time.Sleep(lo + 2*time.Second)
	if f := failed(); len(f) > 0 {
		t.Errorf("after the heal: %v", f)
	}
	for _, nd := range nodes {
		waitStatus(t, time.Second, nd, nodes, StatusAlive)
	}
}
