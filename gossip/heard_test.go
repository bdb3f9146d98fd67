package gossip

import (
	"context"
	"net/netip"
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

// TestReturnHeldLeftIsHeard: a member that returns at an incarnation the
// others hold it left at is counted alive once it is heard. x marks its
// leave (one incarnation up, tagLeaving) and leaves while p is paused: p
// keeps x alive at the incarnation before the mark. x comes back with both
// as seeds and exchanges state with p alone (a join exchanges state with
// the first seed that answers, and here b's stream is cut), reads there that it is
// alive at that older incarnation and refutes it one above, which is the
// incarnation b holds x left at. memberlist lets a leave win a tie, sends
// nothing to a member it holds left and does not probe it, so b (and any
// member b's leave reaches) would hold x left until a full state sync
// (30 s apart on a LAN: the fault harness saw a returning leader held
// failed for 34 s, docs/RELIABILITY.md). x probes b, and b, hearing a
// member it holds left, exchanges state with it: x reads its leave and
// refutes it above.
func TestReturnHeldLeftIsHeard(t *testing.T) {
	nodes := startCluster(t, 3, func(i int, c *Config) {
		c.Timing.PushPullInterval = time.Hour // no full sync comes to the rescue
		c.Timing.ReconnectInterval = time.Hour
		c.Timing.GossipToTheDeadTime = time.Hour // b remembers x's leave
		// Nobody probes (and so nobody suspects p while it is paused)
		// but x once it is back.
		c.Timing.ProbeInterval = time.Hour
	})
	b, p, x := nodes[0], nodes[1], nodes[2]
	addr := func(nd *node) string { return nd.LocalMember().Addr }
	all := func(string, bool) bool { return true }
	toP := func(a string, _ bool) bool { return a == addr(p) }
	p.net.blocked.Store(&all) // p pauses: it sends nothing and hears nothing
	b.net.blocked.Store(&toP)
	x.net.blocked.Store(&toP)

	xCfg := x.cfg
	xCfg.BindAddr, xCfg.Join = addr(x), nil
	xCfg.Timing.ProbeInterval = LocalTiming().ProbeInterval
	if err := x.Leave(); err != nil {
		t.Fatal(err)
	}
	if err := x.Shutdown(); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, 10*time.Second, b, []*node{x}, StatusLeft)
	time.Sleep(500 * time.Millisecond) // b's news of the leave has been sent
	if s, _ := statusOf(p, x.cfg.Name); s != StatusAlive {
		t.Fatalf("p, paused, holds x %s, want alive", s)
	}

	heal(nodes)
	back := startNode(t, xCfg)
	streamToB := func(a string, stream bool) bool { return stream && a == addr(b) }
	back.net.blocked.Store(&streamToB)
	returned := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := back.Join(ctx, []string{addr(b), addr(p)}); err != nil {
		t.Fatal(err)
	}
	all3 := []*node{b, p, back}
	for _, nd := range all3 {
		waitStatus(t, 5*time.Second, nd, all3, StatusAlive)
	}
	t.Logf("x listed alive everywhere %v after its return", time.Since(returned))
}

// TestHealWatchWatchesLeftMembers: a member that left is watched from the
// end of its leave (quickLeaveBound), not while it still gossips, and no
// longer once it joins again or another member takes its address.
func TestHealWatchWatchesLeftMembers(t *testing.T) {
	tm := LocalTiming()
	w := newHealWatch(tm)
	t0 := time.Unix(1000, 0)
	x := Member{Name: "x", Addr: "10.0.0.3:7946"}
	if !w.note([]Event{{Type: EventLeave, Member: x}}, t0) {
		t.Fatal("a leave did not change the watched addresses")
	}
	if got := w.watchList(); len(got) != 1 || got[netip.MustParseAddrPort(x.Addr)] != "x" {
		t.Fatalf("watch list %v, want x at %s", got, x.Addr)
	}
	quick := quickLeaveBound(tm)
	if _, greet, _ := w.heard("x", t0.Add(quick-time.Millisecond), 2); greet {
		t.Error("greeted a member still leaving")
	}
	addr, greet, _ := w.heard("x", t0.Add(quick), 2)
	if !greet || addr != x.Addr {
		t.Errorf("heard after its leave: greet %v at %q, want a greet at %s", greet, addr, x.Addr)
	}
	if _, greet, _ := w.heard("x", t0.Add(quick+time.Millisecond), 2); greet {
		t.Error("greeted twice within the regreet")
	}

	// Another member at x's address: greeting x would reach it.
	y := Member{Name: "y", Addr: x.Addr}
	if !w.note([]Event{{Type: EventJoin, Member: y}}, t0) || len(w.watchList()) != 0 {
		t.Errorf("still watching x at an address y joined from: %v", w.watchList())
	}

	// A leave, then the member back: not watched.
	w.note([]Event{{Type: EventLeave, Member: x}}, t0)
	w.note([]Event{{Type: EventJoin, Member: x}}, t0)
	if len(w.watchList()) != 0 || len(w.left) != 0 {
		t.Errorf("watching a member that joined again: %v %v", w.watchList(), w.left)
	}

	// A leave, then a failure (serf reports a failed member that had
	// left again, e.g. a new run that stopped): watched at once.
	w.note([]Event{{Type: EventLeave, Member: x}, {Type: EventFailed, Member: x}}, t0)
	if _, greet, _ := w.heard("x", t0, 2); !greet {
		t.Error("a failed member, once left, waits out the leave's bound")
	}
}
