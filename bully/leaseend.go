package bully

import "time"

// leaseEnd is when the voters' promises to a term run out unless its leader
// renews them, as the driver last learned it from the voters (LeaseEnds).
type leaseEnd struct {
	leader Node
	term   uint64
	at     time.Time
}

// NextInLine reports the term this node would succeed: the leader and term
// it follows, or last followed while it knows no leader, when the election
// would pick this node once that leader is gone. That is, it is a follower
// that may lead (eligible, not cut off from the voters, not holding after a
// resign of its own), and no other eligible live node, neither holding nor
// silent, outranks it but the leader. ok is false otherwise. The driver
// watches the voters' promises to that term for this node only (LeaseEnds),
// so the watch does not grow with the fleet.
func (m *Machine) NextInLine(now time.Time) (leader Node, term uint64, ok bool) {
	l, t := m.lastLeader, m.lastTerm
	switch {
	case m.state != StateFollower, l.IsZero(), m.isSelf(l),
		!m.leader.IsZero() && (m.leader != l || m.term != t),
		!m.cfg.Self.Eligible, m.cutOff, now.Before(m.holdUntil), m.awaiting(now):
		return Node{}, 0, false
	}
	for _, p := range m.live { // higher(), without its sort: this runs on every tick
		if p.Node != l && p.Eligible && m.cfg.Self.Less(p.Node) && !m.isHeld(p.Name, now) && !m.isSilent(p.Name, now) {
			return Node{}, 0, false
		}
	}
	return l, t, true
}

// LeaseEnds tells the Machine when the voters' promises to leader's term
// run out unless that leader renews them: the instant from which a
// majority of the voters may grant a new term, as they last reported it. A
// zero at means unknown. The driver calls it for the term NextInLine names;
// an end for another term than the last one this node followed is ignored.
//
// At that instant a follower of the term that is still next in line takes
// the term as ended (its leader stopped renewing: crashed, frozen, or cut
// off from the voters): it leaves the leader out of its elections as
// silent (it has not taken part since) and campaigns at once, so its lease
// round reaches the voters as they become free, instead of waiting for
// gossip to declare the leader failed or for three missed announcements.
// And a follower that forgot the leader earlier (gossip dropped it) neither
// campaigns nor lets a lower node's ELECTION start its campaign before the
// end, as after a refused round: a lease round sent earlier would be
// refused and burn an epoch.
//
// Safety does not rest on it: the voters grant nothing before their
// promises end, and a leader's own lease ends before the voters' promises
// do. A late end only delays the campaign to what it was without it; an
// early one (the leader renewed after the voters' last report) costs a
// refused round.
func (m *Machine) LeaseEnds(now time.Time, leader Node, term uint64, at time.Time) {
	e := leaseEnd{}
	if !at.IsZero() && !leader.IsZero() && leader == m.lastLeader && term == m.lastTerm {
		e = leaseEnd{leader: leader, term: term, at: at}
	}
	if e.leader == m.end.leader && e.term == m.end.term && e.at.Equal(m.end.at) {
		return
	}
	pending := m.endPending(now)
	m.end = e
	if m.state == StateFollower && m.leader.IsZero() && (pending || m.endPending(now)) {
		m.scheduleCampaign(now) // the campaign waits for the new end, or no longer
	}
}

// endPending reports whether the lease of the last term this node
// followed is known to run until after now.
func (m *Machine) endPending(now time.Time) bool {
	return m.end.term != 0 && m.end.leader == m.lastLeader && m.end.term == m.lastTerm && now.Before(m.end.at)
}

// endDeadline is the lease end the Machine acts on while it follows that
// term's leader, zero when none.
func (m *Machine) endDeadline() time.Time {
	if m.state != StateFollower || m.end.term == 0 || m.leader != m.end.leader || m.term != m.end.term {
		return time.Time{}
	}
	return m.end.at
}

// checkLeaseEnd ends the followed term once the voters' promises to it have
// run out unrenewed, if this node is next in line: the leader is silent,
// and this node campaigns at once (it wins without asking anyone when no
// other node outranks it).
func (m *Machine) checkLeaseEnd(now time.Time) {
	at := m.endDeadline()
	if at.IsZero() || now.Before(at) {
		return
	}
	l := m.leader
	if _, _, ok := m.NextInLine(now); !ok {
		return
	}
	m.end = leaseEnd{}
	m.markSilent(now, l.Name)
	m.dropLeader("the voters' promises to its term ran out unrenewed")
	m.startElection(now)
}
