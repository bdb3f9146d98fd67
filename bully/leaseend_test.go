package bully

import (
	"math/rand/v2"
	"testing"
	"time"
)

// leaseEndFixture is n2 following n3's term 5, with n1 below both: n2 is
// next in line.
type leaseEndFixture struct {
	now    time.Time
	m      *Machine
	n1, n3 Member
	self   Node
	term   uint64
}

func newLeaseEndFixture(t *testing.T) *leaseEndFixture {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Self = Member{Node: Node{ID: 2, Name: "n2"}, Eligible: true}
	cfg.Rand = rand.New(rand.NewPCG(1, 2))
	f := &leaseEndFixture{now: time.Unix(1000, 0), self: cfg.Self.Node, term: 5,
		n1: Member{Node: Node{ID: 1, Name: "n1"}, Eligible: true},
		n3: Member{Node: Node{ID: 3, Name: "n3"}, Eligible: true}}
	m, err := New(cfg, f.now)
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	m.SetMembers(f.now, []Member{f.n1, f.n3})
	m.Step(f.now, Message{Type: MsgCoordinator, From: f.n3.Node, To: f.self, Leader: f.n3.Node, Term: f.term, Epoch: f.term})
	m.Ready()
	if l, term, ok := m.NextInLine(f.now); !ok || l != f.n3.Node || term != f.term {
		t.Fatalf("NextInLine = %v %d %v, want n3 5 true", l, term, ok)
	}
	return f
}

// runUntil ticks every 10 ms until d has passed or a lease round is asked
// for, and returns the round's epoch and when it was asked (zero if none).
func (f *leaseEndFixture) runUntil(d time.Duration) (uint64, time.Time) {
	for end := f.now.Add(d); f.now.Before(end); {
		f.now = f.now.Add(10 * time.Millisecond)
		f.m.Tick(f.now)
		if e := f.m.Ready().Acquire; e != 0 {
			return e, f.now
		}
	}
	return 0, time.Time{}
}

// TestLeaseEndTakesOverAtOnce: the node next in line, told when the
// voters' promises to its leader's term run out, campaigns at that instant
// and wins at once (the leader, which stopped renewing, is silent), though
// gossip still lists the leader and it never missed an announcement. Before,
// it waited for gossip or three announce intervals (9 s).
func TestLeaseEndTakesOverAtOnce(t *testing.T) {
	f := newLeaseEndFixture(t)
	end := f.now.Add(1500 * time.Millisecond)
	f.m.LeaseEnds(f.now, f.n3.Node, f.term, end)
	if d := f.m.Deadline(); !d.Equal(end) {
		t.Fatalf("Deadline = %v, want the lease end %v (the driver must tick then)", d.Sub(f.now), end.Sub(f.now))
	}
	epoch, at := f.runUntil(3 * time.Second)
	if epoch <= f.term || at.Before(end) || at.Sub(end) > 10*time.Millisecond {
		t.Fatalf("lease round %d asked %v after the end, want one above %d at the end", epoch, at.Sub(end), f.term)
	}
	if !f.m.isSilent("n3", f.now) {
		t.Fatal("the leader that stopped renewing is not left out as silent")
	}
}

// TestLeaseEndOnlyForNextInLine: a node with a live eligible node between
// it and the leader does not act on the end; nor does the node next in
// line act on an end of a term it does not follow.
func TestLeaseEndOnlyForNextInLine(t *testing.T) {
	f := newLeaseEndFixture(t)
	n4 := Member{Node: Node{ID: 4, Name: "n4"}, Eligible: true}
	f.m.Step(f.now, Message{Type: MsgCoordinator, From: n4.Node, To: f.self, Leader: n4.Node, Term: 6, Epoch: 6})
	f.m.SetMembers(f.now, []Member{f.n1, f.n3, n4})
	if _, _, ok := f.m.NextInLine(f.now); ok {
		t.Fatal("n2 is next in line with n3 live between it and the leader n4")
	}
	f.m.LeaseEnds(f.now, n4.Node, 6, f.now.Add(time.Second))
	if e, _ := f.runUntil(3 * time.Second); e != 0 {
		t.Fatalf("n2 started lease round %d for a term it is not next in line for", e)
	}
	if st := f.m.Status(); st.Leader != n4.Node {
		t.Fatalf("n2 follows %v, want n4", st.Leader)
	}
	// An end for an older term is ignored.
	f.m.SetMembers(f.now, []Member{f.n1, n4})
	f.m.LeaseEnds(f.now, f.n3.Node, f.term, f.now.Add(time.Second))
	if e, _ := f.runUntil(2 * time.Second); e != 0 {
		t.Fatalf("n2 acted on the end of an older term (round %d)", e)
	}
}

// TestLeaseEndHoldsCampaignAfterGossipDrop: when gossip drops the leader
// before its promises end, the node next in line campaigns at the end, not
// at once; a lower node's ELECTION meanwhile is answered without starting
// a round (it would be refused and burn an epoch). Before, it campaigned at
// once, was refused, and retried after the promises plus a backoff.
func TestLeaseEndHoldsCampaignAfterGossipDrop(t *testing.T) {
	f := newLeaseEndFixture(t)
	end := f.now.Add(1500 * time.Millisecond)
	f.m.LeaseEnds(f.now, f.n3.Node, f.term, end)
	f.m.SetMembers(f.now, []Member{f.n1}) // gossip declares n3 failed
	if d := f.m.Deadline(); !d.Equal(end) {
		t.Fatalf("campaign at %v, want at the lease end %v", d.Sub(f.now), end.Sub(f.now))
	}
	if e, _ := f.runUntil(500 * time.Millisecond); e != 0 {
		t.Fatalf("lease round %d before the end", e)
	}
	reply := f.m.Step(f.now, Message{Type: MsgElection, From: f.n1.Node, To: f.self, Epoch: f.term})
	if reply == nil || reply.Type != MsgAnswer {
		t.Fatalf("the lower node's ELECTION got %v, want an ANSWER", reply)
	}
	if rd := f.m.Ready(); rd.Acquire != 0 || len(rd.Messages) != 0 {
		t.Fatalf("the lower node's ELECTION started a campaign before the end: %+v", rd)
	}
	epoch, at := f.runUntil(2 * time.Second)
	if epoch == 0 || at.Before(end) || at.Sub(end) > 10*time.Millisecond {
		t.Fatalf("lease round %d at %v after the end, want one at the end", epoch, at.Sub(end))
	}
}

// TestResignClearsLeaseEnd: a RESIGN of the term means its promises were
// released: the end the voters reported no longer holds the campaign back.
func TestResignClearsLeaseEnd(t *testing.T) {
	f := newLeaseEndFixture(t)
	end := f.now.Add(1500 * time.Millisecond)
	f.m.LeaseEnds(f.now, f.n3.Node, f.term, end)
	f.m.Step(f.now, Message{Type: MsgResign, From: f.n3.Node, To: f.self, Leader: f.n3.Node, Term: f.term, Epoch: f.term})
	epoch, at := f.runUntil(2 * time.Second)
	if epoch == 0 || !at.Before(end) {
		t.Fatalf("lease round %d %v after the old end, want one before it", epoch, at.Sub(end))
	}
}
