package bully

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/tenurehq/tenure/internal/broken"
)

// onElection answers a lower node's ELECTION, and starts this node's own
// election if no leader is known (the bully rule: a live higher node takes
// the election over), unless it leaves the election to a successor named
// by the last leader (handover.go). A node that cannot lead (not eligible, or cut off
// from a majority of the voters), or holds after a resign, stays silent so
// the sender does not wait on it.
//
// An ELECTION from the followed leader says it no longer leads, unless its
// epoch is below the leader's term: then the leader sent it while it
// campaigned for that term, and the network held it back (TCP delivers
// after a partition heals a request written during it, long after the
// sender gave up on it). Forgotten then, the leader's followers said "no
// leader" until its next COORDINATOR.
func (m *Machine) onElection(now time.Time, msg Message) *Message {
	if m.leader == msg.From && msg.Epoch >= m.term {
		m.forgetLeader(now, "it campaigns (an ELECTION from it)") // a node that campaigns does not lead
	}
	if !m.cfg.Self.Eligible || m.cutOff || now.Before(m.holdUntil) {
		return nil
	}
	reply := m.stamp(Message{Type: MsgAnswer, To: msg.From, Leader: m.leader, Term: m.term})
	if m.state == StateFollower && m.leader.IsZero() && !m.awaiting(now) {
		if now.Before(m.retryAt) || m.endPending(now) {
			// Its last lease round failed moments ago, or the voters still
			// promise the last leader: it answers, so the lower node does
			// not take over, but campaigns only once its backoff is over
			// or the promises have run out (the timer is already set for
			// then).
			return &reply
		}
		m.startElection(now)
	}
	return &reply
}

// onAnswer defers to the higher node that answered: follow the leader it
// names, or wait for its COORDINATOR. A leader records the answer of a
// higher node to its COORDINATOR as a claim (see checkPreempt).
func (m *Machine) onAnswer(now time.Time, msg Message) {
	if m.state == StateLeader && m.cfg.Self.Less(msg.From) && m.isLive(msg.From) {
		m.claim(now, msg.From)
		return
	}
	m.conflict(now, msg.Leader, msg.Term, false)
	if m.state != StateElecting {
		return
	}
	if !msg.Leader.IsZero() && !m.isSelf(msg.Leader) && m.isLive(msg.Leader) && m.accepts(msg.Leader, msg.Term) {
		m.follow(now, msg.Leader, msg.Term)
		return
	}
	m.state = StateWaiting
	m.deadline = now.Add(m.cfg.CoordinatorTimeout)
}

// onCoordinator adopts an announced leader unless this node has followed a
// later term (then it tells the announcer), or it leads or campaigns and
// does not yield to the announcer. A follower that outranks the leader
// answers, so that a leader preempts only nodes that take part (see silent).
func (m *Machine) onCoordinator(now time.Time, msg Message) *Message {
	l, term := msg.From, msg.Term
	switch m.state {
	case StateLeader:
		m.conflict(now, l, term, false)
		if m.state == StateLeader && term < m.term {
			m.send(m.coordinator(l))
		}
		return nil
	case StateAcquiring:
		if !m.yieldsTo(l, term, m.acquiring) {
			if m.passed == nil || term >= m.passed.Term {
				m.passed = &msg
			}
			return nil
		}
	}
	if !m.accepts(l, term) {
		return nil
	}
	m.follow(now, l, term)
	if m.cfg.Preempt && m.cfg.Self.Eligible && m.mayClaim && l.Less(m.cfg.Self.Node) && !now.Before(m.holdUntil) &&
		m.mayClaimFrom(msg.Chosen) {
		reply := m.stamp(Message{Type: MsgAnswer, To: l, Leader: l, Term: term})
		return &reply
	}
	return nil
}

// accepts reports whether this node may adopt l's term: a later term than
// any it followed, or the one it follows, unless l resigned it. Offered an
// earlier term by another leader, it tells that leader of the later one
// instead.
//
// A message naming a term its leader resigned is late: the network held
// it back (TCP delivers after a partition heals requests written during
// it). Followed again, the resigned leader was named in this node's
// status and ANSWERs until its successor's COORDINATOR came, or for three
// announce intervals when none did.
func (m *Machine) accepts(l Node, term uint64) bool {
	if l == m.resignedBy && term <= m.resignedTerm {
		return false
	}
	if term > m.lastTerm || (term == m.lastTerm && l == m.lastLeader) {
		return true
	}
	if l != m.lastLeader {
		m.send(Message{Type: MsgInfo, To: l, Leader: m.lastLeader, Term: m.lastTerm})
	}
	return false
}

// conflict handles a leader learning of another leader x's term t. A term
// below its own is stale. Otherwise it yields to a live x that wins by
// yieldsTo, or starts a new term above t, so that no node sees the term it
// follows go back or repeat. A resigned x is never yielded to.
func (m *Machine) conflict(now time.Time, x Node, t uint64, resigned bool) {
	if m.state != StateLeader || x.IsZero() || m.isSelf(x) || t < m.term {
		return
	}
	if !resigned && m.isLive(x) && m.yieldsTo(x, t, m.term) {
		m.yield(now, x, t)
		return
	}
	m.win()
}

// yieldsTo decides between this node's term mine and another leader's: with
// Preempt the higher rank wins; without, the later term wins and rank breaks
// a tie (two partition sides in available mode may share an epoch).
func (m *Machine) yieldsTo(l Node, term, mine uint64) bool {
	if m.cfg.Preempt {
		return m.cfg.Self.Less(l)
	}
	return term > mine || (term == mine && m.cfg.Self.Less(l))
}

// yield ends this node's term in favour of leader l of term. If l's term is
// no later than the one ended, l is told (by the RESIGN, and by accepts) and
// starts a later term, which this node then follows.
func (m *Machine) yield(now time.Time, l Node, term uint64) {
	m.stepDown(now, fmt.Sprintf("yielding to %s, leader of term %d", l.Name, term))
	if m.accepts(l, term) {
		m.follow(now, l, term)
	}
}

// onResign forgets a leader that stepped down, and keeps a holding node out
// of elections for its hold. A leader hearing that another's later term
// ended starts a term above it. A term handed to a successor makes the
// successor take over at once and the others wait for it (handover.go).
func (m *Machine) onResign(now time.Time, msg Message) {
	if msg.Term >= m.resignedTerm {
		m.resignedBy, m.resignedTerm = msg.From, msg.Term
	}
	if msg.Hold {
		m.held[msg.From.Name] = now.Add(m.holdFor(msg))
	}
	handed := m.handedOver(msg)
	if handed && !m.isSelf(msg.Successor) {
		m.await(now, msg.Successor)
	}
	m.conflict(now, msg.From, msg.Term, true)
	if m.end.leader == msg.From && msg.Term >= m.end.term {
		m.end = leaseEnd{} // released: the promises end now, not when reported
	}
	if m.leader == msg.From && msg.Term >= m.term {
		m.forgetLeader(now, "it resigned")
	}
	if m.passed != nil && m.passed.From == msg.From && msg.Term >= m.passed.Term {
		m.passed = nil // its term ended: not one to follow when this round fails
	}
	if handed && m.isSelf(msg.Successor) {
		m.ho.takeUntil, m.ho.natural = now.Add(m.cfg.transferWindow()), msg.Natural
		m.takeOver(now)
	}
}

// timeout handles the expiry of the current state's timer.
func (m *Machine) timeout(now time.Time) {
	m.first = nil
	switch m.state {
	case StateFollower:
		if !m.leader.IsZero() && !m.isLive(m.leader) {
			m.forgetLeader(now, "gossip does not list it alive")
			return
		}
		if !m.leader.IsZero() || !m.cfg.Self.Eligible {
			return
		}
		if m.taking(now) {
			if m.takeOver(now); m.state == StateAcquiring {
				return
			}
		}
		if now.Before(m.holdUntil) || m.cutOff || m.awaiting(now) {
			m.scheduleCampaign(now)
			return
		}
		m.startElection(now)
	case StateElecting:
		// No node asked answered: they are silent. Ask the next higher
		// ones, or win when none is left.
		for _, p := range m.asked(now) {
			m.markSilent(now, p.Name)
		}
		m.startElection(now)
	case StateWaiting:
		m.ask(now, true) // the node that answered sent no COORDINATOR
	}
}

// startElection sends ELECTION to the highest few higher eligible live
// nodes (asked), or wins at once when there is none.
func (m *Machine) startElection(now time.Time) { m.ask(now, false) }

// ask is startElection; again says that the round follows a wait for the
// COORDINATOR of a node that answered (electionWait).
func (m *Machine) ask(now time.Time, again bool) {
	asked := m.asked(now)
	if len(asked) == 0 {
		m.win()
		return
	}
	m.state, m.asking, m.reasking = StateElecting, now, again
	m.deadline = now.Add(m.electionWait())
	for _, p := range asked {
		m.send(Message{Type: MsgElection, To: p.Node})
	}
}

// asked are the nodes a round of a campaign asks: the Config.Fanout()
// highest of higher.
func (m *Machine) asked(now time.Time) []peer {
	h := m.higher(now)
	if f := m.cfg.Fanout(); len(h) > f {
		h = h[len(h)-f:]
	}
	return h
}

// win takes a new epoch and asks the driver for the lease round. At the
// largest epoch there is no next one: it reports Exhausted and stays a
// follower rather than wrap around.
func (m *Machine) win() {
	if m.epoch == math.MaxUint64 {
		m.ready.Exhausted = true
		if m.state != StateLeader {
			m.state, m.deadline = StateFollower, time.Time{}
		}
		return
	}
	if m.epoch == 0 || !broken.Is(broken.NoEpochBump) {
		m.epoch++
	}
	m.acquiring, m.passed = m.epoch, nil
	m.state = StateAcquiring
	m.deadline = time.Time{}
	m.ready.Acquire = m.epoch
}

// checkPreempt makes the leader yield to a higher eligible node that has
// been live, and claimed leadership in answer to every COORDINATOR, for
// Stabilization: at least twice, and in answer to the latest one. Gossip's
// word that a node is alive is not enough: a node cut off from the voters
// (or frozen) does not claim, and yielding to it would leave the cluster
// without a leader. A claim that answered only an earlier COORDINATOR does
// not count until the claimant answers again: it may have stopped
// claiming since (its reach probe found it cut off), and a leader that
// yielded on its earlier answers handed its term to a node that could not
// take it (core schedule 272,725). A lost answer, which claimGap
// tolerates, only puts the yield off to the next announcement. The
// highest such node is named successor. With Config.ConfirmPreempt the
// leader first asks its driver whether that node can take the term
// (PreemptAnswered): its claims say it reached a majority of the voters
// when it last probed them, up to an announce interval and a probe's
// budget before, and a node cut off since could not take the term
// (TestPreemptionAsksTheClaimant in the agent's simulation).
func (m *Machine) checkPreempt(now time.Time) {
	if !m.cfg.Preempt || m.ho.chosen || (m.preempting.term == m.term && now.Before(m.preempting.until)) {
		return
	}
	announced := m.announce.Add(-m.cfg.AnnounceInterval) // the latest COORDINATOR to all
	for _, p := range m.higher(now) {
		c, ok := m.claims[p.Name]
		if !ok || now.Sub(c.last) > m.claimGap() || c.last.Before(announced) {
			continue
		}
		since := p.since
		if c.since.After(since) {
			since = c.since
		}
		if until, ok := m.held[p.Name]; ok && until.After(since) {
			since = until
		}
		if c.last.After(c.since) && now.Sub(since) >= m.cfg.Stabilization {
			if m.cfg.ConfirmPreempt {
				m.preempting = preemptAsk{to: p.Node, term: m.term, until: now.Add(m.claimGap())}
				m.ready.Preempt = p.Node
				return
			}
			m.yieldTerm(now, p.Node)
			return
		}
	}
}

// yieldTerm ends this leader's term in favour of n, a higher node that
// kept claiming it. The RESIGN names n, the highest node that keeps
// claiming, as natural successor: it takes over at once, and the others
// do not elect meanwhile (the election could pick a higher node that
// resigned and claims nothing).
func (m *Machine) yieldTerm(now time.Time, n Node) {
	m.endTerm(now, Message{Type: MsgResign, Successor: n, Natural: true},
		"preempted by "+n.Name+", a higher node that kept claiming")
}

// PreemptAnswered gives a leader its driver's answer to Ready.Preempt:
// whether to, the higher node it would yield its term to, can take the
// term now. With yes it yields to to, as long as to's claim still holds;
// with no it keeps its term and forgets to's claims, which must then last
// another Stabilization before it asks again. An answer about another
// node or an earlier term, or one that comes after this node stopped
// leading, changes nothing.
func (m *Machine) PreemptAnswered(now time.Time, to Node, canTake bool) {
	if m.state != StateLeader || m.preempting.to != to || m.preempting.term != m.term {
		return
	}
	m.preempting = preemptAsk{}
	c, ok := m.claims[to.Name]
	switch {
	case !canTake:
		delete(m.claims, to.Name)
	case ok && now.Sub(c.last) <= m.claimGap():
		m.yieldTerm(now, to)
	}
}

// claimGap is the longest silence between two answers of one claim: two
// announce intervals and an election timeout, so one lost answer does not
// break it.
func (m *Machine) claimGap() time.Duration {
	return 2*m.cfg.AnnounceInterval + m.cfg.ElectionTimeout
}

// claim records an answer of higher node n to this leader's COORDINATOR.
func (m *Machine) claim(now time.Time, n Node) {
	c, ok := m.claims[n.Name]
	if !ok || now.Sub(c.last) > m.claimGap() {
		c.since = now
	}
	c.last = now
	m.claims[n.Name] = c
}

// stepDown ends this node's term, for the reason why: release the lease,
// tell everyone, and schedule the next campaign.
func (m *Machine) stepDown(now time.Time, why string) {
	m.endTerm(now, Message{Type: MsgResign}, why)
}

// endTerm ends this node's term with resign (a MsgResign, completed here
// with the term) sent to every live member; why is for the driver's log
// (Ready.Why). A RESIGN that names a successor leaves the election to it
// for the transfer window here too, as at the nodes that receive it: a
// leader that yielded to a higher node started its own ELECTION a rank
// delay later, and a node above the successor that the RESIGN had not
// reached yet answered it by campaigning, and took the term (random
// schedule 586,637, in the agent's core simulation).
func (m *Machine) endTerm(now time.Time, resign Message, why string) {
	clear(m.claims)
	m.ho.chosen = false
	m.ready.Release, m.ready.Why = m.term, why
	resign.Leader, resign.Term = m.cfg.Self.Node, m.term
	m.broadcast(resign)
	m.state = StateFollower
	if s := resign.Successor; !s.IsZero() && !m.isSelf(s) {
		m.await(now, s)
	}
	m.forgetLeader(now, why)
}

// follow adopts l as leader of term. A leader that gossip does not list as
// live (its announcement overtook the membership, or was in flight when it
// died, or gossip holds it as leaving) is followed until its next
// announcement is overdue (announceOverdue, and at least
// CoordinatorTimeout), unless it shows up live; each announcement starts
// that wait again. Gossip can hold a live member as leaving for seconds
// (serf#662, gossip/leaving.go); given CoordinatorTimeout alone, as
// before, such a leader was forgotten before each of its announcements:
// "no leader" for 5-20 ms of every second with the local timing, a third
// of the time with the LAN one. The longer wait does not slow a
// failover: followers that list the leader learn of its death from
// gossip, and with leases no other term starts before the dead leader's
// lease ends, a TTL after its last renewal.
func (m *Machine) follow(now time.Time, l Node, term uint64) {
	m.first = nil
	m.state = StateFollower
	m.leader, m.term = l, term
	m.heard = now
	m.deadline = time.Time{}
	m.failures, m.retryAt = 0, time.Time{} // a vacancy after this one starts afresh
	if !m.isLive(l) {
		m.deadline = now.Add(m.cfg.CoordinatorTimeout)
		if d := m.announceOverdue(); d.After(m.deadline) {
			m.deadline = d
		}
	}
	if term > m.lastTerm {
		m.lastLeader, m.lastTerm = l, term
	}
	if m.end.leader != l || m.end.term != term {
		m.end = leaseEnd{}
	}
	m.ho.follows()
}

// forgetLeader clears the known leader (dropLeader) and, for a follower,
// schedules the campaign for the vacancy.
func (m *Machine) forgetLeader(now time.Time, why string) {
	m.dropLeader(why)
	if m.state == StateFollower {
		m.scheduleCampaign(now)
	}
}

// dropLeader clears the known leader, recording which it was and why
// (Status.Lost).
func (m *Machine) dropLeader(why string) {
	if !m.leader.IsZero() {
		m.lost = m.leader.Name + ": " + why
	}
	m.leader, m.term = Node{}, 0
}

// scheduleCampaign sets the campaign timer of an eligible follower: one
// RankDelay per higher eligible live node plus jitter, after any hold.
func (m *Machine) scheduleCampaign(now time.Time) {
	if !m.cfg.Self.Eligible {
		m.deadline = time.Time{}
		return
	}
	if m.taking(now) && !m.ho.retry.IsZero() {
		// A refused take-over retries soon, for the release on its way.
		// The old term's end the driver reports (LeaseEnds) does not put
		// it off: the voters' answers that give it predate the release.
		// A retry already due fires at the next tick.
		m.deadline = m.ho.retry
		return
	}
	base := now
	if m.holdUntil.After(base) {
		base = m.holdUntil
	}
	if m.retryAt.After(base) {
		base = m.retryAt
	}
	if m.awaiting(now) && m.ho.until.After(base) {
		base = m.ho.until
	}
	k := time.Duration(len(m.higher(now)))
	if m.endPending(now) && !m.end.at.Before(base) {
		if k == 0 {
			// Next in line: campaign as the voters become free, no sooner
			// (the round would be refused) and no later (there is nobody
			// to spread from).
			m.deadline = m.end.at
			return
		}
		base = m.end.at
	}
	m.deadline = base.Add(k*m.cfg.RankDelay + m.jitter())
}

// higher returns the eligible live nodes ranked above self and not holding,
// in rank order.
func (m *Machine) higher(now time.Time) []peer {
	var out []peer
	for _, p := range m.live {
		if p.Eligible && m.cfg.Self.Less(p.Node) && !m.isHeld(p.Name, now) && !m.isSilent(p.Name, now) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j].Node) })
	return out
}

func (m *Machine) isHeld(name string, now time.Time) bool {
	until, ok := m.held[name]
	return ok && now.Before(until)
}

func (m *Machine) isSelf(n Node) bool { return n == m.cfg.Self.Node }

func (m *Machine) isLive(n Node) bool {
	p, ok := m.live[n.Name]
	return ok && p.Node == n
}

func (m *Machine) observe(e uint64) {
	if e > m.epoch {
		m.epoch = e
	}
}

// stamp fills the sender fields of msg.
func (m *Machine) stamp(msg Message) Message {
	msg.From = m.cfg.Self.Node
	msg.Epoch = m.epoch
	return msg
}

func (m *Machine) send(msg Message) {
	m.ready.Messages = append(m.ready.Messages, m.stamp(msg))
}

// broadcast sends msg to every live member, in name order.
func (m *Machine) broadcast(msg Message) {
	names := make([]string, 0, len(m.live))
	for name := range m.live {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		msg.To = m.live[name].Node
		m.send(msg)
	}
}

func (m *Machine) jitter() time.Duration { return m.randDuration(m.cfg.Jitter) }

// randDuration returns a uniform random duration in [0, d].
func (m *Machine) randDuration(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(m.rand.Int64N(int64(d) + 1))
}

func sortNodes(ns []Node) {
	sort.Slice(ns, func(i, j int) bool { return ns[i].Less(ns[j]) })
}
