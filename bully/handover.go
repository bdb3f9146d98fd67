package bully

import (
	"time"

	"github.com/tenurehq/tenure/internal/broken"
)

// Handover says how a leader's term ends (ResignWith).
type Handover struct {
	// Hold is how long this node stays out of elections: it neither
	// campaigns nor answers ELECTIONs. Zero means Config.ResignHold.
	Hold time.Duration
	// Successor, when not zero, is the node the term is handed to. The
	// RESIGN names it: it campaigns at once, without ELECTION or rank
	// delay, while the others neither campaign nor start elections for
	// the transfer window (Config.TransferWindow), and its COORDINATORs
	// for the term it wins carry Chosen, so nodes that outrank it do not
	// preempt that term. A successor that is not live, not eligible or
	// cut off does not take over; the normal election follows the window.
	// The caller picks a live eligible node; this node itself counts as
	// none.
	Successor Node
	// Natural hands the term to the node the election would pick anyway
	// (the highest live eligible one after this node, neither holding nor
	// silent; Successor is then left zero): it takes over at once,
	// without the election's rounds and rank delays, but its term is not
	// chosen: a higher node that comes back preempts it as usual.
	Natural bool
}

// handover is a Machine's record of terms ended and handed over.
//
// Resign is not undone: a node that resigned (yielded) claims leadership
// from no leader (step 5 of the design: it does not answer a lower
// leader's COORDINATOR), however it ranks, until it leads again. It may
// lead again by election, when the cluster has no leader, or once it is
// made eligible again after a drain (SetEligible); its agent does not
// persist the resign, so after a restart it claims as any node does.
type handover struct {
	yielded bool

	// to is the successor named by a RESIGN this node received: until
	// until, this node neither campaigns nor starts an election.
	to    Node
	until time.Time

	// takeUntil: this node was named successor; until then it campaigns
	// without ELECTION, and retries a refused lease round at once.
	takeUntil time.Time
	// retry is when a refused round of the take-over is retried
	// (acquireFailed), zero once it has been: a campaign scheduled
	// meanwhile keeps it.
	retry time.Time
	// chosenEpoch is the epoch of the lease round of a handed-over term;
	// chosen marks the term this node leads as one handed to it, which it
	// does not let a higher node preempt.
	chosenEpoch uint64
	chosen      bool
	// natural: the term this node is taking over was handed to it as the
	// natural successor, so it will not be chosen.
	natural bool
}

// yield records that this node resigned: it claims from no leader that
// follows, whichever takes the term (the successor its RESIGN named, or,
// when that one could not take it, the node the election picked, or a
// higher node that preempted either). Before, it yielded only to the
// named successor, then only to the first leader it followed: when a
// frozen successor came back and preempted the fallback leader, the
// resigned node took the term back, and tenure run work moved again.
func (h *handover) yield() {
	h.yielded = true
	h.takeUntil, h.chosenEpoch, h.retry = time.Time{}, 0, time.Time{}
}

// follows records that this node adopted a leader.
func (h *handover) follows() {
	h.to, h.until, h.takeUntil, h.retry = Node{}, time.Time{}, time.Time{}, time.Time{}
}

// leads records that this node leads term epoch.
func (h *handover) leads(epoch uint64) {
	h.chosen = epoch == h.chosenEpoch
	h.chosenEpoch, h.takeUntil, h.retry = 0, time.Time{}, time.Time{}
	h.yielded = false
}

// ResignWith makes the leader stop leading: it releases its lease (Ready),
// sends RESIGN with hold to every live member, stays out of elections for
// h.Hold (Config.ResignHold if zero), and from then on does not claim
// leadership from the leader that follows it, even where it outranks that
// leader (see handover). With h.Successor it hands the term to that node.
// It returns ErrNotLeader when this node does not lead.
func (m *Machine) ResignWith(now time.Time, h Handover) error {
	if m.state != StateLeader {
		return ErrNotLeader
	}
	if m.isSelf(h.Successor) {
		h.Successor = Node{}
	}
	if h.Natural && h.Successor.IsZero() {
		h.Successor = m.naturalSuccessor(now)
	}
	hold := h.Hold
	if hold <= 0 {
		hold, h.Hold = m.cfg.ResignHold, 0
	}
	m.holdUntil = now.Add(hold)
	m.ho.yield()
	m.endTerm(now, Message{Type: MsgResign, Hold: true, HoldFor: h.Hold, Successor: h.Successor,
		Natural: h.Natural && !h.Successor.IsZero()}, "resigned")
	return nil
}

// SetEligible changes whether this node may lead, as a drain and its end
// do. A leader made ineligible steps down with hold, as Resign does; a
// candidate stops campaigning. Made eligible again, it campaigns for a
// vacancy and claims leadership from a lower leader as any node does, even
// from the one that followed its own resign.
func (m *Machine) SetEligible(now time.Time, eligible bool) {
	if m.cfg.Self.Eligible == eligible {
		return
	}
	m.cfg.Self.Eligible = eligible
	if eligible {
		m.ho.yielded = false
		if m.state == StateFollower && m.leader.IsZero() {
			m.scheduleCampaign(now)
		}
		return
	}
	m.ho.takeUntil, m.ho.chosenEpoch, m.ho.retry = time.Time{}, 0, time.Time{}
	switch {
	case m.state == StateLeader:
		s := m.naturalSuccessor(now)
		m.endTerm(now, Message{Type: MsgResign, Hold: true, Successor: s, Natural: !s.IsZero()}, "no longer eligible to lead (drained, or its data dir cannot be written)")
	case m.state.Campaigning():
		// A lease round in flight that wins is released (Acquired).
		m.state, m.acquiring = StateFollower, 0
		m.forgetLeader(now, "this node is no longer eligible")
	}
}

// NaturalSuccessor is the node a natural hand-over by this leader would
// name now (Handover.Natural, and a leader made ineligible): zero when
// this node does not lead or no other node could take the term. A driver
// may ask that node whether it answers before resigning, and report a
// node that does not with PassOver.
func (m *Machine) NaturalSuccessor(now time.Time) Node {
	if m.state != StateLeader {
		return Node{}
	}
	return m.naturalSuccessor(now)
}

// PassOver reports that n did not answer this node (it is frozen, stopped
// or cut off though gossip lists it alive): natural hand-overs and this
// node's elections pass it over as silent, as if it had not answered an
// ELECTION, until a message from it comes or two stabilisation delays
// pass.
func (m *Machine) PassOver(now time.Time, n Node) {
	if m.isSelf(n) {
		return
	}
	if p, ok := m.live[n.Name]; ok && p.Node == n {
		m.markSilent(now, n.Name)
	}
}

// naturalSuccessor is the node the election picks once this one steps
// down: the live eligible node of highest rank, other than this one, that
// is neither holding nor silent; zero when there is none.
func (m *Machine) naturalSuccessor(now time.Time) Node {
	var best Node
	for _, p := range m.live {
		if m.isSelf(p.Node) || !p.Eligible || m.isHeld(p.Name, now) || m.isSilent(p.Name, now) {
			continue
		}
		if best.IsZero() || best.Less(p.Node) {
			best = p.Node
		}
	}
	return best
}

// holdFor is how long the sender of a RESIGN with hold stays out.
func (m *Machine) holdFor(msg Message) time.Duration {
	if msg.HoldFor > 0 {
		return msg.HoldFor
	}
	return m.cfg.ResignHold
}

// handedOver reports whether msg, a RESIGN, hands the latest term this
// node knows to a successor it should act on: itself, or a live eligible
// node. A RESIGN of an earlier term (delayed or duplicated) hands nothing
// over, and a leader ignores it (conflict handles it).
func (m *Machine) handedOver(msg Message) bool {
	s := msg.Successor
	if s.IsZero() || s == msg.From || m.state == StateLeader {
		return false
	}
	if msg.Term < m.lastTerm || (msg.Term == m.lastTerm && msg.From != m.lastLeader) {
		return false
	}
	if m.isSelf(s) {
		return true
	}
	p, ok := m.live[s.Name]
	return ok && p.Node == s && p.Eligible
}

// await leaves the election to successor s for the transfer window: no
// campaign before its end, and an election of this node's own in progress
// (no lease round yet) is dropped.
func (m *Machine) await(now time.Time, s Node) {
	m.ho.to, m.ho.until = s, now.Add(m.cfg.transferWindow())
	if m.state == StateElecting || m.state == StateWaiting {
		m.state = StateFollower
	}
	if m.state == StateFollower && m.leader.IsZero() {
		m.scheduleCampaign(now)
	}
}

// stopAwaitingGone ends the wait for a named successor that gossip no
// longer lists alive and eligible (it left or failed, was drained, or its
// data dir cannot be written): it will not take the term, and waiting out
// the transfer window would only leave the cluster without a leader for
// longer. Campaigning sooner changes no lease rule: the lease round still
// decides, and a successor that takes over all the same wins as before.
func (m *Machine) stopAwaitingGone(now time.Time) {
	if !m.awaiting(now) {
		return
	}
	if p, ok := m.live[m.ho.to.Name]; ok && p.Node == m.ho.to && p.Eligible {
		return
	}
	m.ho.until = now
	if m.state == StateFollower && m.leader.IsZero() {
		m.scheduleCampaign(now)
	}
}

// awaiting reports whether this node leaves the election to a successor.
func (m *Machine) awaiting(now time.Time) bool {
	return !m.ho.to.IsZero() && now.Before(m.ho.until)
}

// taking reports whether this node is a named successor still taking over.
func (m *Machine) taking(now time.Time) bool { return now.Before(m.ho.takeUntil) }

// takeOver makes this node, named successor, win at once: no ELECTION, no
// rank delay. The lease round still decides (Ready.Acquire). Being named
// ends a hold of this node's own resign: the operator asked for it by
// name. A node that cannot lead now (ineligible, cut off from the voters)
// does nothing: the others start the normal election when their transfer
// window ends.
func (m *Machine) takeOver(now time.Time) {
	m.ho.retry = time.Time{} // due or not, it is this attempt
	if !m.cfg.Self.Eligible || m.cutOff || m.state == StateLeader {
		return
	}
	m.holdUntil = time.Time{}
	if m.state != StateAcquiring {
		m.win()
	}
	if m.state == StateAcquiring && !m.ho.natural {
		m.ho.chosenEpoch = m.acquiring
	}
}

// mayClaimFrom reports whether this node may claim leadership from a
// leader whose COORDINATOR said chosen: not from a term handed over by
// name, and from no leader since this node's own resign (handover).
func (m *Machine) mayClaimFrom(chosen bool) bool {
	return !chosen && (!m.ho.yielded || broken.Is(broken.UndoHandOver))
}
