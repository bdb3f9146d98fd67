package agent

import (
	"cmp"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/internal/testlog"
)

// Drains, transfers and resigns with a hold in the simulation: the random
// schedules (runSchedule) call randomHandover once per round, and check()
// asserts I1–I3 and that no two tenure run commands run at once after every
// step, as for every other operation.

// randomHandover sometimes drains a running node or lifts its drain, makes
// the leader transfer its term to a random node (a refusal is fine: it may
// be down, drained, or the leader itself), or makes a node resign with a
// random hold. It keeps two nodes that have not left undrained, so the
// final phase (which may cut one node off) still has a node that can lead.
func (s *csim) randomHandover() {
	defer s.keepTwoEligible()
	name := s.order[s.rand.IntN(len(s.order))]
	n := s.nodes[name]
	switch s.rand.IntN(12) {
	case 0, 1:
		s.trace("drained %s=%v", name, !n.drained)
		s.setDrained(name, !n.drained)
	case 2, 3:
		if l := s.leader(); l != "" {
			ln := s.nodes[l]
			s.trace("transfer from %s to %s", l, name)
			if s.answers(l, name) && s.refusesTerm(name) {
				return // the agent asks first (Agent.transferHere)
			}
			_, _ = ln.c.transfer(s.local(ln, s.now), name)
			s.collect(l)
		}
	case 4:
		if n.up && !n.paused {
			hold := time.Duration(s.rand.IntN(4)) * s.ttl
			s.trace("resign %s holding %v", name, hold)
			s.askSuccessor(n)
			_ = n.c.resignFor(s.local(n, s.now), hold)
			s.collect(name)
		}
	}
}

// setDrained drains a running node or lifts its drain, as `tenure drain`
// does: the agent persists it and tells its core, and gossip spreads the
// node's new eligibility. A stopped or frozen agent does not answer.
func (s *csim) setDrained(name string, drained bool) {
	n := s.nodes[name]
	if !n.up || n.paused || n.left || n.drained == drained {
		return
	}
	if drained && s.undrained() <= 2 {
		return
	}
	n.drained = drained
	if drained {
		s.askSuccessor(n)
	}
	n.c.setEligible(s.local(n, s.now), !drained)
	s.collect(name)
	s.syncViews()
}

// undrained counts the nodes that have not left and are not drained.
func (s *csim) undrained() int {
	k := 0
	for _, name := range s.order {
		if n := s.nodes[name]; !n.left && !n.drained {
			k++
		}
	}
	return k
}

// keepTwoEligible lifts drains (of running nodes; a stopped one boots
// undrained) until two nodes that have not left are undrained: graceful
// leaves may have taken the undrained ones. A frozen node is skipped: it
// cannot be told, and it still runs drained when it resumes. Marking one
// undrained here without telling it once left the final phase with the
// node it cut off as the only one that could lead.
func (s *csim) keepTwoEligible() {
	for _, name := range s.order {
		if n := s.nodes[name]; s.undrained() < 2 && n.drained && !n.left {
			switch {
			case n.up && !n.paused:
				s.setDrained(name, false)
			case !n.up:
				n.drained = false // lifted by the operator while it was stopped
			}
		}
	}
}

// ledSince returns the terms led at or after epoch, by node.
func (s *csim) ledSince(epoch uint64) map[uint64]string {
	out := map[uint64]string{}
	for e, name := range s.terms {
		if e >= epoch {
			out[e] = name
		}
	}
	return out
}

// TestTransferHandsOverToNamedNode: with leases, the leader n5 hands its
// term to n2 (the election would pick n4): n2 leads within a fraction of a
// TTL, with no other term in between, and still leads the same term after
// the old leader's hold and three stabilisation delays.
func TestTransferHandsOverToNamedNode(t *testing.T) {
	s := newCsim(t, testlog.Seed(t))
	s.addNodes(5)
	l, _ := s.waitLeader(10*time.Second, "n5")
	n := s.nodes[l]
	first := n.led[len(n.led)-1]
	if _, err := n.c.transfer(s.local(n, s.now), "n2"); err != nil {
		t.Fatal(err)
	}
	s.collect(l)
	next, took := s.waitLeader(s.ttl)
	if next != "n2" || took > s.ttl/4 {
		t.Fatalf("after transfer to n2: %s leads after %v, want n2 well within a TTL", next, took)
	}
	t.Logf("transfer took %v", took)
	e := LocalElection()
	s.run(e.ResignHold + 2*e.AnnounceInterval + 3*e.Stabilization)
	led := s.ledSince(first + 1)
	if len(led) != 1 || s.leader() != "n2" {
		t.Fatalf("terms led after the transfer: %v, leader now %q; want one term, n2's", led, s.leader())
	}
}

// TestDrainedLeaderHandsOverOnce: a drained leader hands over (after its
// command stopped) to the next node, which keeps leading; the drained node
// never leads while drained, and once the drain is lifted it preempts as
// any higher node does.
func TestDrainedLeaderHandsOverOnce(t *testing.T) {
	s := newCsim(t, testlog.Seed(t))
	s.addNodes(3)
	s.waitLeader(10*time.Second, "n3")
	first := s.nodes["n3"].led[len(s.nodes["n3"].led)-1]
	s.setDrained("n3", true)
	next, took := s.waitLeader(s.ttl)
	if next != "n2" || took > s.ttl/4 {
		t.Fatalf("after draining n3: %s leads after %v, want n2 well within a TTL", next, took)
	}
	e := LocalElection()
	s.run(e.ResignHold + 2*e.AnnounceInterval + 3*e.Stabilization)
	if led := s.ledSince(first + 1); len(led) != 1 || s.leader() != "n2" {
		t.Fatalf("terms led after the drain: %v, leader now %q; want one term, n2's", led, s.leader())
	}
	s.crash("n3")
	s.boot("n3", 0) // the drain is persisted: it survives the restart
	s.run(e.StartupDelay + 3*e.Stabilization)
	if led := s.ledSince(first + 1); len(led) != 1 || s.leader() != "n2" {
		t.Fatalf("after n3 restarted drained: terms %v, leader %q", led, s.leader())
	}
	s.setDrained("n3", false)
	if l, _ := s.waitLeader(e.AnnounceInterval+e.Stabilization+s.ttl, "n3"); l != "n3" {
		t.Fatalf("after the drain was lifted %s leads, want n3", l)
	}
}

// TestResignIsNotUndoneWithLeases: after a resign, the next leader keeps
// its term past the old leader's hold and the stabilisation delay.
func TestResignIsNotUndoneWithLeases(t *testing.T) {
	s := newCsim(t, testlog.Seed(t))
	s.addNodes(3)
	s.waitLeader(10*time.Second, "n3")
	n := s.nodes["n3"]
	first := n.led[len(n.led)-1]
	if err := n.c.resign(s.local(n, s.now)); err != nil {
		t.Fatal(err)
	}
	s.collect("n3")
	s.waitLeader(s.ttl, "n2")
	e := LocalElection()
	s.run(e.ResignHold + 2*e.AnnounceInterval + 3*e.Stabilization)
	if led := s.ledSince(first + 1); len(led) != 1 || s.leader() != "n2" {
		t.Fatalf("terms led after the resign: %v, leader now %q; want one term, n2's", led, s.leader())
	}
}

// TestTransferRefusals: a follower names the leader to ask; the leader
// refuses a member that is not live or may not lead, and does nothing when
// asked to hand over to itself.
func TestTransferRefusals(t *testing.T) {
	s := newCsim(t, testlog.Seed(t))
	s.addNodes(3)
	s.waitLeader(10*time.Second, "n3")
	s.run(time.Second) // the COORDINATOR reaches everyone
	s.setDrained("n1", true)
	n1, n3 := s.nodes["n1"], s.nodes["n3"]
	if l, err := n1.c.transfer(s.local(n1, s.now), "n2"); !errors.Is(err, errNotLeaderHere) || l != (bully.Node{ID: 3, Name: "n3"}) {
		t.Fatalf("follower: leader %v, err %v; want n3 and not-leader", l, err)
	}
	now := s.local(n3, s.now)
	if _, err := n3.c.transfer(now, "n1"); !errors.Is(err, errTransferIneligible) {
		t.Fatalf("to drained n1: %v", err)
	}
	if _, err := n3.c.transfer(now, "n9"); !errors.Is(err, errTransferUnknown) {
		t.Fatalf("to unknown n9: %v", err)
	}
	if _, err := n3.c.transfer(now, "n3"); err != nil || !n3.c.leaseValid(now) {
		t.Fatalf("to itself: %v, still leads %v", err, n3.c.leaseValid(now))
	}
	s.crash("n2")
	if _, err := n3.c.transfer(s.local(n3, s.now), "n2"); !errors.Is(err, errTransferUnknown) {
		t.Fatalf("to crashed n2: %v", err)
	}
}

// TestTransfersGoToTheNamedNode: in a healthy cluster (messages delayed
// 1–30 ms, in any order), every transfer makes the named node lead next,
// within a fraction of a TTL, whatever its rank, however the release to
// the voters and the RESIGN to the successor race.
func TestTransfersGoToTheNamedNode(t *testing.T) {
	for i := range 10 {
		t.Run(fmt.Sprint(i), transfersGoToTheNamedNode)
	}
}

func transfersGoToTheNamedNode(t *testing.T) {
	s := newCsim(t, testlog.Seed(t))
	s.addNodes(5)
	l, _ := s.waitLeader(10 * time.Second)
	var slowest time.Duration
	for range 40 {
		s.run(time.Duration(s.rand.IntN(1000)) * time.Millisecond)
		to := l
		for to == l {
			to = s.order[s.rand.IntN(len(s.order))]
		}
		ln := s.nodes[l]
		if _, err := ln.c.transfer(s.local(ln, s.now), to); err != nil {
			t.Fatalf("%s to %s: %v", l, to, err)
		}
		s.collect(l)
		next, took := s.waitLeader(s.ttl)
		if next != to || took > s.ttl/2 {
			t.Fatalf("transfer %s to %s: %s leads after %v\n%s", l, to, next, took, s.dump())
		}
		l, slowest = next, max(slowest, took)
	}
	t.Logf("slowest transfer: %v", slowest)
}

// checkHandOverKept ends a random schedule with one hand-over in a quiet
// cluster (healed, but for the node whose peer links finalPhase may have
// cut): the leader resigns, with the default hold or a random one, or
// transfers its term to a random node, which may be the cut-off one and
// so unable to take it; in about half the schedules another node (perhaps
// the successor) is frozen at the act and thaws at a random instant of
// the window. Once another node has led after the act, the node
// that handed over must not lead again within its hold and the delays
// after it: a hand-over is not undone (else tenure run work moves twice).
// A named or natural successor that cannot take the term leaves it to the
// election, and the node the election picks keeps it too; a higher node
// that thaws may preempt that one, but the node that handed over stays
// out.
func (s *csim) checkHandOverKept() {
	l := s.leader()
	if l == "" || s.beyondTolerance() {
		return
	}
	ln := s.nodes[l]
	first := ln.led[len(ln.led)-1]
	hold := LocalElection().ResignHold
	// Sometimes another node is frozen at the act (it may be the successor)
	// and runs again at a random instant of the window.
	frozen, thawAt := "", time.Time{}
	if other := s.order[s.rand.IntN(len(s.order))]; other != l && s.rand.IntN(2) == 0 && s.nodes[other].up {
		frozen = other
		s.nodes[frozen].paused = true
		thawAt = s.now.Add(time.Duration(s.rand.Int64N(int64(hold + 2*s.ttl))))
		defer func() { // a refused act returns early: thaw all the same
			if frozen != "" {
				s.nodes[frozen].paused = false
				s.syncViews()
			}
		}()
	}
	// Sometimes l's host is loaded: each peer message has its own
	// connection, so its releases may reach the voters well after its
	// RESIGN reaches the successor. The successor relays the release
	// that came with the RESIGN; in half of these schedules l sends none
	// there (a peer of the version before), and the successor's first
	// round may be refused.
	if s.rand.IntN(3) == 0 {
		lag := time.Duration(s.rand.Int64N(int64(LocalElection().ElectionTimeout)))
		s.slowIf = slowReleases(l, lag)
		if s.rand.IntN(2) == 0 {
			s.alter = unrelayed(l)
		}
		defer func() { s.slowIf, s.alter = nil, nil }()
	}
	var act string
	actAt, oldDeadline := s.now, ln.c.lease.deadline
	switch s.rand.IntN(3) {
	case 0:
		act = "resign"
		s.askSuccessor(ln)
		_ = ln.c.resign(s.local(ln, s.now))
	case 1:
		hold = time.Duration(1+s.rand.IntN(3)) * s.ttl
		act = fmt.Sprintf("resign --hold %v", hold)
		s.askSuccessor(ln)
		_ = ln.c.resignFor(s.local(ln, s.now), hold)
	case 2:
		to := l
		for to == l {
			to = s.order[s.rand.IntN(len(s.order))]
		}
		act = "transfer to " + to
		if s.answers(l, to) && s.refusesTerm(to) {
			return // the agent asks first (Agent.transferHere)
		}
		if _, err := ln.c.transfer(s.local(ln, s.now), to); err != nil {
			return // refused: down, left, drained or unknown to the leader
		}
	}
	s.trace("closing hand-over: %s's %s (term %d), %q frozen until %v", l, act, first, frozen, thawAt.Sub(s.start))
	s.collect(l)
	// In a quiet cluster (nothing frozen, no peer link cut) the next
	// leader's lease starts while the old one still runs: the release
	// frees the voters, so nobody waits for the old promises to end.
	quiet := frozen == "" && s.cutOff == ""
	oldEnd := s.global(ln, oldDeadline)
	froze := ""
	if frozen != "" {
		froze = fmt.Sprintf(", %s frozen for %v", frozen, thawAt.Sub(s.now))
	}
	e := LocalElection()
	end := s.now.Add(hold + 2*e.AnnounceInterval + 3*e.Stabilization + 2*s.maxTTL())
	took, last := "", ""
	for ; s.now.Before(end); s.tick() {
		if frozen != "" && !s.now.Before(thawAt) {
			s.nodes[frozen].paused, frozen = false, ""
			s.syncViews()
		}
		now := s.leader()
		switch {
		case now != "" && now != l:
			if took == "" && quiet && !s.now.Before(oldEnd) {
				s.t.Fatalf("%s's %s (term %d) waited for the old lease: %s led %v after the act, when %s's lease had %v left\n%s",
					l, act, first, now, s.now.Sub(actAt), l, oldEnd.Sub(actAt), s.dump())
			}
			took = cmp.Or(took, now)
			last = now
		case took != "" && now == l && !s.linked(last, l):
			// l could not hear the leader before it (the peer link
			// between them is cut): not the RESIGN that ended its term
			// and named its successor, nor its COORDINATOR. With no
			// leader in sight, l may win an election as any node does
			// (docs/GUARANTEES.md: it never preempts).
			return
		case took != "" && now == l:
			s.t.Fatalf("%s's %s (term %d%s) was undone: %s led after it, then %s again; terms since: %v\n%s",
				l, act, first, froze, took, l, s.ledSince(first+1), s.dump())
		}
	}
}

// askSuccessor does what the agent does before a resign, a drain, a
// graceful stop or a step-down for a failed disk of leader n
// (Agent.askSuccessor): it passes over up to maxPassOver natural
// successors that could not answer n now (stopped, frozen, or with a link
// between them cut) or refuse the term. A node that does not lead names
// none, and nothing happens. n.passedAll records whether it passed over
// maxPassOver nodes: the RESIGN then names one nobody asked
// (checkYields).
func (s *csim) askSuccessor(n *cnode) {
	n.passedAll = false
	for range maxPassOver {
		now := s.local(n, s.now)
		succ := n.c.naturalSuccessor(now)
		if succ.IsZero() || (s.answers(n.name, succ.Name) && !s.refusesTerm(succ.Name)) {
			return
		}
		n.c.passOver(now, succ)
	}
	n.passedAll = true
}

// refusesTerm does what a successor's agent does when a leader asks it
// whether it can take the term (Agent.serveCanTake): b's core answers,
// probing its data dir, and then b asks the voters whether it reaches a
// majority of them (as the network stands now: the check takes a round
// trip). It reports whether b refused.
func (s *csim) refusesTerm(b string) bool {
	nb := s.nodes[b]
	now := s.local(nb, s.now)
	r := nb.c.canTake(now)
	s.collect(b)
	return r.Refused != "" || !s.reachesVoters(b)
}

// reachesVoters reports whether b, asked whether it can take a term,
// would hear from a majority of the voters as the network stands now
// (core.canTakeCheck, Agent.checkReach); true when it runs without a
// quorum.
func (s *csim) reachesVoters(b string) bool {
	nb := s.nodes[b]
	rc, _, check := nb.c.canTakeCheck(s.local(nb, s.now))
	if !check {
		return true
	}
	answered := map[string]bool{}
	for _, v := range rc.others() {
		answered[v.Name] = s.answers(b, v.Name)
	}
	return rc.reached(answered)
}

// answers reports whether a request from a, running, to b would be
// answered now: the request and the reply both get through (linked).
func (s *csim) answers(a, b string) bool { return s.linked(a, b) && s.linked(b, a) }

// TestTransferToNodeOnceCutOff: a node that once found itself cut off from
// the voters (its requests to them lost), and since follows a higher
// leader (so it no longer probes its reach: the verdict is old), takes a
// term handed to it by name: named, it probes again and takes over.
func TestTransferToNodeOnceCutOff(t *testing.T) {
	s := newCsim(t, testlog.Seed(t))
	s.addNodes(5)
	s.waitLeader(10*time.Second, "n5")
	for _, o := range s.othersThan("n3") {
		s.cutPeers("n3", o, true)
	}
	s.crash("n5")
	s.waitLeader(10*time.Second, "n4")
	s.run(5 * time.Second)
	if !s.nodes["n3"].c.reach.cutOff {
		t.Fatalf("n3 never found itself cut off\n%s", s.dump())
	}
	s.heal()
	s.run(5 * time.Second)
	t.Logf("n3 still counts itself cut off after the heal: %v", s.nodes["n3"].c.reach.cutOff)
	if st := s.nodes["n3"].c.m.Status(); st.Leader.Name != "n4" {
		t.Fatalf("n3 follows %q, want n4\n%s", st.Leader.Name, s.dump())
	}
	n4 := s.nodes["n4"]
	if _, err := n4.c.transfer(s.local(n4, s.now), "n3"); err != nil {
		t.Fatal(err)
	}
	s.collect("n4")
	next, took := s.waitLeader(s.ttl)
	t.Logf("n3 led %v after the transfer", took)
	if next != "n3" || took > s.ttl/4 {
		t.Fatalf("after transfer to n3: %s leads after %v, want n3 well within a TTL\n%s", next, took, s.dump())
	}
}
