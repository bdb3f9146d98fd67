package bully

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestResignIsNotUndoneByPreemption: a leader that resigns does not claim
// leadership back from the node that took over, even though it outranks it:
// after its hold, the stabilisation delay and more, the successor still
// leads the same term.
func TestResignIsNotUndoneByPreemption(t *testing.T) {
	s := newSim(t, true)
	names := s.startCluster(3)
	s.run(4 * time.Second)
	first := s.agree("n3", names...)
	if err := s.nodes["n3"].m.Resign(s.now); err != nil {
		t.Fatal(err)
	}
	s.flush("n3")
	s.run(time.Second)
	second := s.agree("n2", names...)
	if second <= first {
		t.Fatalf("epoch after resign = %d, want > %d", second, first)
	}
	s.requireKept(t, "n2", second, names...)
}

// requireKept runs the simulation past a resigned node's hold and the
// announcements and stabilisation after it that would let that node
// claim, and fails t unless among all still follow leader's term epoch:
// the hand-over was undone.
func (s *sim) requireKept(t *testing.T, leader string, epoch uint64, among ...string) {
	t.Helper()
	cfg := s.nodes[leader].m.cfg
	s.run(cfg.ResignHold + 2*cfg.AnnounceInterval + 2*cfg.Stabilization)
	if got := s.agree(leader, among...); got != epoch {
		t.Fatalf("%s's term changed from %d to %d: the hand-over was undone", leader, epoch, got)
	}
}

// TestResignHoldKeepsNodeOut: with a hold longer than ResignHold, the
// resigned node stays out of elections for that hold, and the others leave
// it out of theirs as long: when the next leader goes, the node below it
// takes over without an ELECTION to the holding node. After the hold it
// does not preempt that node either (a resign is not undone, whoever
// leads after it); it leads again by election once n1 is gone.
func TestResignHoldKeepsNodeOut(t *testing.T) {
	s := newSim(t, true)
	names := s.startCluster(3)
	s.run(4 * time.Second)
	s.agree("n3", names...)
	cfg := s.nodes["n3"].m.cfg
	hold := 3 * cfg.ResignHold
	if err := s.nodes["n3"].m.ResignWith(s.now, Handover{Hold: hold}); err != nil {
		t.Fatal(err)
	}
	s.flush("n3")
	s.run(time.Second)
	s.agree("n2", names...)
	s.run(cfg.ResignHold + time.Second) // past the default hold, within the given one
	s.crash("n2")
	s.trace = nil
	s.run(cfg.CoordinatorTimeout + time.Second)
	s.agree("n1", "n3")
	for _, m := range s.trace {
		if m.Type == MsgElection && m.To.Name == "n3" || m.From.Name == "n3" && m.Type == MsgAnswer {
			t.Fatalf("%v during n3's hold", m)
		}
	}
	third := s.agree("n1", "n3")
	s.run(hold)
	if got := s.agree("n1", "n3"); got != third {
		t.Fatalf("after its hold n3 took n1's term %d: now %d", third, got)
	}
	s.crash("n1")
	s.run(cfg.CoordinatorTimeout + time.Second)
	if got := s.agree("n3", "n3"); got <= third {
		t.Fatalf("with n1 gone n3 leads epoch %d, want > %d", got, third)
	}
}

// TestTransferHandsTermToNamedSuccessor: the leader hands its term to n2,
// not to the highest node below it: n2 takes over without any ELECTION,
// its COORDINATORs say the term was chosen, and neither the old leader
// nor n4 (which outranks n2) takes it from it.
func TestTransferHandsTermToNamedSuccessor(t *testing.T) {
	s := newSim(t, true)
	names := s.startCluster(5)
	s.run(4 * time.Second)
	first := s.agree("n5", names...)
	s.trace = nil
	if err := s.nodes["n5"].m.ResignWith(s.now, Handover{Successor: s.nodes["n2"].member.Node}); err != nil {
		t.Fatal(err)
	}
	s.flush("n5")
	s.run(200 * time.Millisecond)
	second := s.agree("n2", names...)
	if second <= first {
		t.Fatalf("epoch after transfer = %d, want > %d", second, first)
	}
	for _, m := range s.trace {
		if m.Type == MsgElection {
			t.Fatalf("%v during a transfer", m)
		}
		if m.Type == MsgCoordinator && !m.Chosen {
			t.Fatalf("%v: the handed-over term is not marked chosen", m)
		}
	}
	cfg := s.nodes["n5"].m.cfg
	s.run(cfg.ResignHold + 2*cfg.AnnounceInterval + 3*cfg.Stabilization)
	if got := s.agree("n2", names...); got != second {
		t.Fatalf("n2's handed-over term %d was preempted (now %d)", second, got)
	}
}

// TestChosenTermIsNotPreemptedByNewcomers: nodes that learn of a
// handed-over term from its COORDINATOR (a restarted old leader that forgot
// it resigned, a new higher node) do not preempt it either. A later term of
// the same leader, won by election, is preempted as usual.
func TestChosenTermIsNotPreemptedByNewcomers(t *testing.T) {
	s := newSim(t, true)
	names := s.startCluster(3)
	s.run(4 * time.Second)
	s.agree("n3", names...)
	if err := s.nodes["n3"].m.ResignWith(s.now, Handover{Successor: s.nodes["n1"].member.Node}); err != nil {
		t.Fatal(err)
	}
	s.flush("n3")
	s.run(200 * time.Millisecond)
	chosen := s.agree("n1", names...)
	s.crash("n3")
	s.start("n3")
	s.add("n9", 9, true)
	cfg := s.nodes["n3"].m.cfg
	s.run(cfg.StartupDelay + 2*cfg.AnnounceInterval + 3*cfg.Stabilization)
	if got := s.agree("n1", "n2", "n3", "n9"); got != chosen {
		t.Fatalf("the chosen term %d was preempted (now %d)", chosen, got)
	}
	// The chosen term ends (its lease is lost): the vacancy goes to the
	// highest node, by election.
	s.nodes["n1"].m.LeaseLost(s.now, chosen)
	s.flush("n1")
	s.run(cfg.CoordinatorTimeout + 2*time.Second)
	if got := s.agree("n9", "n1", "n2", "n3"); got <= chosen {
		t.Fatalf("after the chosen term ended: epoch %d, want > %d", got, chosen)
	}
}

// TestHandOverToFrozenSuccessorFallsBack: a successor that gossip lists
// but that does not take over (frozen), named by a transfer or as a
// resign's natural successor, holds the election up for the transfer
// window only; then the normal election picks the highest node left, and
// that node keeps its term: the node that handed over does not take it
// back after its hold, although it outranks it (else a tenure run command
// would move twice), nor does a transfer's successor when it thaws below
// the new leader.
func TestHandOverToFrozenSuccessorFallsBack(t *testing.T) {
	for _, c := range []struct {
		name             string
		frozen, fallback string
		thaw             bool   // the frozen node runs again before the check
		after            string // who leads after the thaw
		handover         func(s *sim) Handover
	}{
		{"transfer", "n2", "n3", true, "n3", func(s *sim) Handover { return Handover{Successor: s.nodes["n2"].member.Node} }},
		{"resign", "n3", "n2", false, "n2", func(*sim) Handover { return Handover{Natural: true} }},
		// The frozen natural successor outranks the fallback: back, it
		// preempts it as any higher node does, but n4 stays out.
		{"resign-thaw", "n3", "n2", true, "n3", func(*sim) Handover { return Handover{Natural: true} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSim(t, true)
			names := s.startCluster(4)
			s.run(4 * time.Second)
			s.agree("n4", names...)
			s.nodes[c.frozen].mute = true
			cfg := s.nodes["n4"].m.cfg
			if err := s.nodes["n4"].m.ResignWith(s.now, c.handover(s)); err != nil {
				t.Fatal(err)
			}
			s.flush("n4")
			s.run(cfg.transferWindow() - 50*time.Millisecond)
			if got := s.leaders(); len(got) != 0 {
				t.Fatalf("leaders %v within the transfer window to a frozen successor", got)
			}
			s.run(cfg.Jitter + time.Second)
			among := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == c.frozen || n == c.fallback })
			fallback := s.agree(c.fallback, among...)
			if !c.thaw {
				s.requireKept(t, c.fallback, fallback, among...)
				return
			}
			s.nodes[c.frozen].mute = false
			among = append(among, c.frozen, c.fallback)
			s.run(2*cfg.AnnounceInterval + 2*cfg.Stabilization)
			after := s.agree(c.after, among...)
			if c.after == c.fallback && after != fallback {
				t.Fatalf("%s's term changed from %d to %d when %s thawed", c.fallback, fallback, after, c.frozen)
			}
			s.requireKept(t, c.after, after, among...)
		})
	}
}

// TestResignPassesOverSilentSuccessor: a natural successor the driver
// found not answering (PassOver) is not named: a resign hands the term to
// the next node at once, which keeps it while the passed-over node stays
// frozen. Only a leader names a natural successor.
func TestResignPassesOverSilentSuccessor(t *testing.T) {
	s := newSim(t, true)
	names := s.startCluster(4)
	s.run(4 * time.Second)
	first := s.agree("n4", names...)
	n4 := s.nodes["n4"].m
	if got := n4.NaturalSuccessor(s.now); got.Name != "n3" {
		t.Fatalf("natural successor %v, want n3", got)
	}
	if got := s.nodes["n3"].m.NaturalSuccessor(s.now); !got.IsZero() {
		t.Fatalf("a follower names natural successor %v, want none", got)
	}
	s.nodes["n3"].mute = true
	n4.PassOver(s.now, s.nodes["n3"].member.Node)
	if got := n4.NaturalSuccessor(s.now); got.Name != "n2" {
		t.Fatalf("natural successor after passing n3 over: %v, want n2", got)
	}
	if err := n4.ResignWith(s.now, Handover{Natural: true}); err != nil {
		t.Fatal(err)
	}
	s.flush("n4")
	s.run(n4.cfg.transferWindow() / 2) // the named node takes over at once
	among := []string{"n1", "n2", "n4"}
	second := s.agree("n2", among...)
	if second <= first {
		t.Fatalf("epoch after the resign = %d, want > %d", second, first)
	}
	s.requireKept(t, "n2", second, among...)
}

// TestStaleTransferIsIgnored: a RESIGN naming a successor for a term older
// than the one the successor follows (delayed or duplicated) does not make
// it campaign.
func TestStaleTransferIsIgnored(t *testing.T) {
	s := newSim(t, true)
	names := s.startCluster(3)
	s.run(4 * time.Second)
	old := s.agree("n3", names...)
	if err := s.nodes["n3"].m.Resign(s.now); err != nil {
		t.Fatal(err)
	}
	s.flush("n3")
	s.run(time.Second)
	cur := s.agree("n2", names...)
	n1, n3 := s.nodes["n1"], s.nodes["n3"]
	n1.m.Step(s.now, Message{Type: MsgResign, From: n3.member.Node, To: n1.member.Node, Epoch: old,
		Leader: n3.member.Node, Term: old, Hold: true, Successor: n1.member.Node})
	if rd := n1.m.Ready(); rd.Acquire != 0 || len(rd.Messages) != 0 {
		t.Fatalf("a stale transfer made n1 act: %+v", rd)
	}
	if got := s.agree("n2", names...); got != cur {
		t.Fatalf("term changed from %d to %d", cur, got)
	}
}

// TestSuccessorRetriesRefusedRound: the named successor wins at once (a
// lease round, no ELECTION); a refused round is retried within the
// transfer window rather than after the refusing promises run out, and the
// term it wins is announced as chosen.
func TestSuccessorRetriesRefusedRound(t *testing.T) {
	m, cfg, t0, n3 := followingN3(t, 1)
	m.Step(t0, Message{Type: MsgResign, From: n3, To: cfg.Self.Node, Epoch: 4, Leader: n3, Term: 4, Hold: true, Successor: cfg.Self.Node})
	rd := m.Ready()
	if rd.Acquire != 5 || len(rd.Messages) != 0 {
		t.Fatalf("successor: acquire %d, messages %v; want acquire 5 and no ELECTION", rd.Acquire, brief(rd.Messages))
	}
	m.AcquireFailed(t0, 5, 5, cfg.RetryDelay*10) // refused: n3's promises still held
	m.Tick(t0.Add(cfg.ElectionTimeout/2 + cfg.Jitter))
	if rd := m.Ready(); rd.Acquire != 6 || len(rd.Messages) != 0 {
		t.Fatalf("retry: acquire %d, messages %v; want acquire 6 at once", rd.Acquire, brief(rd.Messages))
	}
	m.Acquired(t0, 6)
	rd = m.Ready()
	if len(rd.Messages) != 2 || !rd.Messages[0].Chosen || !rd.Messages[1].Chosen {
		t.Fatalf("announcement of the handed-over term: %v", rd.Messages)
	}
}

// TestRefusedTakeOverIsNotPutOffByLeaseEnd: the successor's round was
// refused by voters its RESIGN outran (the releases were still on their
// way), and the driver's watch then reports the old term's end as those
// voters last gave it, again in the very tick the retry is due (the
// driver runs its watch before the timers). The retry stays soon: waiting
// for that end made a resign wait out the old lease on a loaded host.
func TestRefusedTakeOverIsNotPutOffByLeaseEnd(t *testing.T) {
	m, cfg, t0, n3 := followingN3(t, 2)
	m.Step(t0, Message{Type: MsgResign, From: n3, To: cfg.Self.Node, Epoch: 4, Leader: n3, Term: 4, Hold: true,
		Successor: cfg.Self.Node, Natural: true})
	if rd := m.Ready(); rd.Acquire != 5 {
		t.Fatalf("natural successor: acquire %d, want 5", rd.Acquire)
	}
	end := t0.Add(cfg.RetryDelay * 4)
	m.AcquireFailed(t0, 5, 5, end.Sub(t0))
	if l, term, ok := m.NextInLine(t0); !ok || l != n3 || term != 4 {
		t.Fatalf("next in line: %v %d %v, want n3's term 4", l, term, ok)
	}
	m.LeaseEnds(t0, n3, 4, end)
	retry := t0.Add(cfg.ElectionTimeout/2 + cfg.Jitter)
	if d := m.Deadline(); d.IsZero() || d.After(retry) {
		t.Fatalf("retry due at %v, want by %v (the old term ends at %v)", d.Sub(t0), retry.Sub(t0), end.Sub(t0))
	}
	due := m.Deadline()
	m.LeaseEnds(due, n3, 4, end.Add(-time.Millisecond)) // a fresher answer
	m.Tick(due)
	if rd := m.Ready(); rd.Acquire != 6 || len(rd.Messages) != 0 {
		t.Fatalf("retry: acquire %d, messages %v; want acquire 6 at once", rd.Acquire, brief(rd.Messages))
	}
}

// TestTakeOverRetryCutOffDoesNotSpin: a refused take-over's retry falls
// due while the node is cut off from the voters, so it cannot take over.
// The retry is spent: the timer must not stay in the past (the driver would
// wake at once, again and again, for the rest of the transfer window).
func TestTakeOverRetryCutOffDoesNotSpin(t *testing.T) {
	m, cfg, t0, n3 := followingN3(t, 2)
	m.Step(t0, Message{Type: MsgResign, From: n3, To: cfg.Self.Node, Epoch: 4, Leader: n3, Term: 4, Hold: true,
		Successor: cfg.Self.Node, Natural: true})
	m.Ready()
	m.AcquireFailed(t0, 5, 5, 4*cfg.RetryDelay)
	m.SetReach(true, false)
	due := m.Deadline()
	m.Tick(due)
	if rd := m.Ready(); rd.Acquire != 0 {
		t.Fatalf("cut off: acquire %d, want none", rd.Acquire)
	}
	if d := m.Deadline(); !d.IsZero() && !d.After(due) {
		t.Fatalf("after the spent retry the timer is due at %v, not after %v", d.Sub(t0), due.Sub(t0))
	}
}

// followingN3 is node id's machine among n1, n2 and n3, all eligible and
// live, following n3's term 4.
func followingN3(t *testing.T, id uint64) (*Machine, Config, time.Time, Node) {
	t.Helper()
	m, cfg, t0 := newMachine(t, id, fmt.Sprintf("n%d", id))
	members := []Member{}
	for i := uint64(1); i <= 3; i++ {
		members = append(members, Member{Node: Node{ID: i, Name: fmt.Sprintf("n%d", i)}, Eligible: true})
	}
	n3 := members[2].Node
	m.SetMembers(t0, members)
	m.Step(t0, Message{Type: MsgCoordinator, From: n3, To: cfg.Self.Node, Epoch: 4, Leader: n3, Term: 4})
	m.Ready()
	return m, cfg, t0, n3
}

// TestDrainedLeaderStepsDownAndStaysOut: a leader made ineligible steps
// down and releases its lease; it neither campaigns nor claims while
// ineligible, however long; made eligible again it preempts as usual.
func TestDrainedLeaderStepsDownAndStaysOut(t *testing.T) {
	s := newSim(t, true)
	names := s.startCluster(3)
	s.run(4 * time.Second)
	first := s.agree("n3", names...)
	s.setEligible("n3", false)
	s.run(time.Second)
	second := s.agree("n2", names...)
	cfg := s.nodes["n3"].m.cfg
	s.trace = nil
	s.run(cfg.ResignHold + 3*cfg.Stabilization)
	if got := s.agree("n2", names...); got != second || second <= first {
		t.Fatalf("terms %d, %d, %d: want n2's term to stay", first, second, got)
	}
	for _, m := range s.trace {
		if m.From.Name == "n3" && m.Type != MsgInfo {
			t.Fatalf("drained n3 sent %v", m)
		}
	}
	s.setEligible("n3", true)
	s.run(cfg.AnnounceInterval + cfg.Stabilization + time.Second)
	if got := s.agree("n3", names...); got <= second {
		t.Fatalf("n3 leads epoch %d after its drain ended, want > %d", got, second)
	}
}

// setEligible makes a node eligible or not, as a drain does: the machine
// is told, and gossip spreads the node's new eligibility.
func (s *sim) setEligible(name string, eligible bool) {
	n := s.nodes[name]
	n.member.Eligible = eligible
	n.m.SetEligible(s.now, eligible)
	s.flush(name)
	s.syncViews()
}

// TestTransferBackToHoldingNode: a node named successor takes over even
// while it holds after its own resign or transfer: the operator named it.
func TestTransferBackToHoldingNode(t *testing.T) {
	s := newSim(t, true)
	names := s.startCluster(3)
	s.run(4 * time.Second)
	s.agree("n3", names...)
	n1, n3 := s.nodes["n1"], s.nodes["n3"]
	if err := n3.m.ResignWith(s.now, Handover{Successor: n1.member.Node}); err != nil {
		t.Fatal(err)
	}
	s.flush("n3")
	s.run(200 * time.Millisecond)
	second := s.agree("n1", names...)
	if err := n1.m.ResignWith(s.now, Handover{Successor: n3.member.Node}); err != nil {
		t.Fatal(err)
	}
	s.flush("n1")
	s.run(200 * time.Millisecond)
	if got := s.agree("n3", names...); got <= second {
		t.Fatalf("n3 leads epoch %d, want > %d", got, second)
	}
}

// TestNaturalHandoverSkipsTheElection: a leader resigning with Natural
// hands its term to the node the election would pick (the highest live
// eligible one that is not holding: n3, as n4 holds), which takes over
// without any ELECTION; its term is not chosen, so a restarted node above it
// preempts it as usual.
func TestNaturalHandoverSkipsTheElection(t *testing.T) {
	s := newSim(t, true)
	names := s.startCluster(5)
	s.run(4 * time.Second)
	s.agree("n5", names...)
	cfg := s.nodes["n5"].m.cfg
	for _, m := range s.nodes {
		m.m.held["n4"] = s.now.Add(time.Hour) // as if n4 had resigned
	}
	if err := s.nodes["n5"].m.ResignWith(s.now, Handover{Natural: true}); err != nil {
		t.Fatal(err)
	}
	s.trace = nil
	s.flush("n5")
	s.run(200 * time.Millisecond)
	handed := s.agree("n3", names...)
	for _, m := range s.trace {
		if m.Type == MsgElection {
			t.Fatalf("%v during a natural hand-over", m)
		}
		if m.Type == MsgResign && (m.Successor.Name != "n3" || !m.Natural) {
			t.Fatalf("%v: want the natural successor n3", m)
		}
		if m.Type == MsgCoordinator && m.Chosen {
			t.Fatalf("%v: a natural hand-over's term is marked chosen", m)
		}
	}
	s.crash("n5")
	s.start("n5") // forgets it resigned
	s.run(cfg.StartupDelay + 2*cfg.AnnounceInterval + 3*cfg.Stabilization)
	if got := s.agree("n5", "n1", "n2", "n3"); got <= handed {
		t.Fatalf("the restarted n5 did not preempt the natural successor's term %d (now %d)", handed, got)
	}
}

// TestAwaitEndsWhenSuccessorGoes: the others leave the election to a named
// successor for the transfer window only while gossip lists it alive and
// eligible. One that leaves, fails or becomes ineligible (drained, or its
// data dir failed) after it was named will not take the term: the next
// node leads before the window would have ended.
func TestAwaitEndsWhenSuccessorGoes(t *testing.T) {
	for _, c := range []struct {
		name string
		gone func(s *sim)
	}{
		{"stopped", func(s *sim) { s.crash("n2") }},
		{"ineligible", func(s *sim) { s.setEligible("n2", false) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSim(t, true)
			names := s.startCluster(4)
			s.run(4 * time.Second)
			s.agree("n4", names...)
			s.nodes["n2"].mute = true // named, it does not take over
			cfg := s.nodes["n4"].m.cfg
			act := s.now
			if err := s.nodes["n4"].m.ResignWith(s.now, Handover{Successor: s.nodes["n2"].member.Node}); err != nil {
				t.Fatal(err)
			}
			s.flush("n4")
			s.run(cfg.ElectionTimeout / 5) // the RESIGN is delivered
			if !s.nodes["n3"].m.awaiting(s.now) {
				t.Fatal("n3 does not leave the election to n2")
			}
			c.gone(s)
			for s.now.Before(act.Add(cfg.transferWindow())) {
				s.tick()
				if got := s.leaders(); len(got) > 0 {
					if !slices.Equal(got, []string{"n3"}) {
						t.Fatalf("leaders %v after n2 went; want n3", got)
					}
					t.Logf("n3 leads %v after the act (the transfer window: %v)", s.now.Sub(act), cfg.transferWindow())
					return
				}
			}
			t.Fatalf("no leader within the transfer window of a successor gossip no longer lists\n%s", s.dump())
		})
	}
}

// TestYieldingLeaderLeavesTheTermToItsSuccessor: a leader that yields to
// a higher node that kept claiming leaves the election to that node for
// the transfer window, as the nodes its RESIGN reaches do. Here the
// successor freezes just after the yield and cannot take over. Before,
// the old leader sent its own ELECTION a rank delay later; a node above
// the successor that the RESIGN had not reached yet answered it by
// campaigning, and took the term from the successor.
func TestYieldingLeaderLeavesTheTermToItsSuccessor(t *testing.T) {
	s := newSim(t, true)
	s.startCluster(3)
	s.run(4 * time.Second)
	s.agree("n3", "n1", "n2")
	s.add("n9", 9, true)
	cfg := s.nodes["n3"].m.cfg
	var yielded time.Time
	for end := s.now.Add(cfg.Stabilization + 2*cfg.AnnounceInterval); s.now.Before(end); s.tick() {
		if len(s.nodes["n3"].ended) > 0 {
			yielded = s.now
			break
		}
	}
	if ended := s.nodes["n3"].ended; len(ended) != 1 || !strings.HasPrefix(ended[0], "preempted by n9") {
		t.Fatalf("n3's term ended for %q, want one end, preempted by n9", ended)
	}
	s.nodes["n9"].mute = true
	window := cfg.transferWindow()
	for s.now.Before(yielded.Add(window)) {
		s.sent = nil
		s.tick()
		for _, msg := range s.sent {
			if msg.From.Name == "n3" && msg.Type == MsgElection {
				t.Fatalf("n3 sent an ELECTION to %s %v after yielding to n9; want none within the transfer window (%v)",
					msg.To.Name, s.now.Sub(yielded), window)
			}
		}
	}
}
