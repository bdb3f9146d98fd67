package bully

import (
	"hash/fnv"
	"math/rand/v2"
	"time"
)

// Machine is the election state machine of one node. See the package doc.
type Machine struct {
	cfg  Config
	rand *rand.Rand

	state  State
	leader Node   // known leader, zero when none
	term   uint64 // epoch of the leader's term
	epoch  uint64 // highest epoch seen or used

	live map[string]peer      // live members other than self, by name
	held map[string]time.Time // members that resigned with hold, until when
	// resignedBy resigned resignedTerm, the highest term known to have
	// ended by its leader's RESIGN: a late COORDINATOR or ANSWER naming
	// that term, or an earlier one of the same leader, is not followed
	// (accepts).
	resignedBy   Node
	resignedTerm uint64
	// silent are higher nodes that did not answer an ELECTION this node then
	// won: alive to gossip but not taking part (frozen, or cut off from the
	// peer transport). They are left out of elections and preemption until
	// they send this node a message, or for two stabilisation delays.
	silent map[string]time.Time
	// claims are higher nodes that answered this leader's COORDINATOR
	// ("I outrank you and can lead"): a leader preempts only for a node
	// that has kept claiming for Stabilization.
	claims map[string]claim
	// preempting is the preemption this leader asked its driver to
	// confirm (Config.ConfirmPreempt), while it waits for the answer.
	preempting preemptAsk
	// cutOff: the driver found this node unable to reach a majority of the
	// voters (SetReach). It then neither campaigns nor answers ELECTIONs,
	// so lower nodes that can lead are not held back by it.
	cutOff bool
	// mayClaim: the driver has fresh proof that this node reaches a
	// majority; only then does it claim leadership from a lower leader.
	mayClaim  bool
	holdUntil time.Time // this node resigned: no campaign before
	// retryAt: a lease round failed; no new one before (not even when a
	// lower node's ELECTION arrives). failures counts the rounds failed in
	// a row: the wait doubles with each, up to maxBackoff RetryDelays.
	retryAt  time.Time
	failures int
	deadline time.Time // the current state's timer; zero when none
	// asking is when the current round of ELECTIONs went out; roundTrip
	// the driver's estimate of how long a peer's answer may take
	// (SetRoundTrip). The round waits electionWait from asking; reasking
	// says the round follows a wait for the COORDINATOR of a node that
	// answered, and waits the longest.
	asking    time.Time
	roundTrip time.Duration
	reasking  bool
	acquiring uint64 // epoch of the lease round in flight
	// passed is the latest COORDINATOR that arrived while this node's
	// lease round was in flight and that it did not yield to (a lower
	// leader's, or without Preempt one of no later term); if the round
	// fails, the node follows that leader at once rather than at its next
	// announcement (acquireFailed).
	passed   *Message
	announce time.Time // a leader's next COORDINATOR broadcast
	heard    time.Time // when the followed leader last announced itself, or renewed through this node (Heard)
	queried  time.Time // when this follower first asked its silent leader (checkLeaderHeard)
	reasked  time.Time // when it last asked it (askLeader)
	lost     string    // which leader this node last forgot, and why (Status.Lost)
	// reported is the leader this node forgot on gossip's report that it
	// failed, its term and when (askReported).
	reported reportedLeader

	// lastLeader led lastTerm, the highest term this node followed or led;
	// it adopts no lower term, so the terms it reports only grow.
	lastLeader Node
	lastTerm   uint64

	// first is the first campaign of a fresh Machine, while it is pending:
	// the startup delay counted from start (or a settling delay from the
	// last eligible member gossip revealed, if later), plus one RankDelay
	// per higher eligible live node, recomputed as gossip reveals the
	// membership.
	first *firstCampaign

	ho handover // resigns, transfers and chosen terms (handover.go)
	// end is when the voters' promises to the last term followed run out
	// unless renewed (LeaseEnds, leaseend.go).
	end leaseEnd

	ready Ready
}

// firstCampaign is when a fresh Machine started, and the jitter drawn for
// its first campaign.
type firstCampaign struct {
	start  time.Time
	jitter time.Duration
	at     time.Time // the deadline it set; any other means the timer was taken over
	grew   time.Time // when gossip last revealed an eligible member not seen before
}

// reportedLeader is a leader forgotten on gossip's report that it failed.
type reportedLeader struct {
	leader Node
	term   uint64
	at     time.Time
}

// claim is a run of answers to a leader's COORDINATOR from a higher node:
// since the first, last the latest.
type claim struct{ since, last time.Time }

// preemptAsk is a leader's question to its driver whether the higher node
// to can take term (Ready.Preempt); the leader waits for the answer until
// until, and then may ask again.
type preemptAsk struct {
	to    Node
	term  uint64
	until time.Time
}

// peer is a live member and the instant this Machine first saw it live.
type peer struct {
	Member
	since time.Time
}

// New returns a Machine that starts as a follower with no leader known and,
// if eligible, campaigns after cfg.StartupDelay plus one cfg.RankDelay per
// higher eligible live node (as SetMembers reveals them), unless a leader
// announces itself first.
func New(cfg Config, now time.Time) (*Machine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := cfg.Rand
	if r == nil {
		h := fnv.New64a()
		h.Write([]byte(cfg.Self.Name))
		r = rand.New(rand.NewPCG(cfg.Self.ID, h.Sum64()))
	}
	m := &Machine{
		cfg:      cfg,
		rand:     r,
		epoch:    cfg.Epoch,
		live:     map[string]peer{},
		held:     map[string]time.Time{},
		silent:   map[string]time.Time{},
		claims:   map[string]claim{},
		mayClaim: true,
	}
	if cfg.Self.Eligible {
		m.first = &firstCampaign{start: now, jitter: m.jitter()}
		m.deadline = now.Add(cfg.StartupDelay + m.first.jitter)
		m.first.at = m.deadline
	}
	return m, nil
}

// Status returns the Machine's current view.
func (m *Machine) Status() Status {
	st := Status{State: m.state, Leader: m.leader, Term: m.term, Epoch: m.epoch}
	if m.leader.IsZero() {
		st.Lost = m.lost
	}
	return st
}

// Deadline returns the instant of the next timer, zero when none is set. A
// driver may use it to sleep until the next Tick is useful; ticking more
// often is harmless.
func (m *Machine) Deadline() time.Time {
	if e := m.endDeadline(); !e.IsZero() && (m.deadline.IsZero() || e.Before(m.deadline)) {
		return e
	}
	return m.deadline
}

// Ready returns and clears what the Machine asks its driver to do.
func (m *Machine) Ready() Ready {
	r := m.ready
	r.Epoch = m.epoch
	m.ready = Ready{}
	return r
}

// SetMembers replaces the live membership (self may be included; it is
// ignored). A leader that left the view is forgotten; a sitting leader
// announces itself to newcomers.
func (m *Machine) SetMembers(now time.Time, members []Member) {
	prev := m.live
	m.live = make(map[string]peer, len(members))
	var newcomers []Node
	for _, mem := range members {
		if mem.Name == m.cfg.Self.Name {
			continue
		}
		p, ok := prev[mem.Name]
		if !ok || p.Member != mem {
			p = peer{Member: mem, since: now}
			newcomers = append(newcomers, mem.Node)
		}
		if !ok && mem.Eligible && m.first != nil {
			m.first.grew = now
		}
		m.live[mem.Name] = p
	}
	for name := range m.held {
		if _, ok := m.live[name]; !ok {
			delete(m.held, name)
		}
	}
	for name := range m.silent {
		if _, ok := m.live[name]; !ok {
			delete(m.silent, name)
		}
	}
	// A leader gossip listed and no longer does is gone (but see
	// leaderDropped). One it never listed (its COORDINATOR overtook the
	// membership) is kept: follow gave it CoordinatorTimeout to show up
	// live. Forgotten at once, as before, a fleet that started together
	// kept dropping and relearning its first leader while gossip spread
	// the joins (seconds on a loaded host).
	if _, was := prev[m.leader.Name]; was && !m.isSelf(m.leader) && !m.isLive(m.leader) {
		m.leaderDropped(now)
	}
	m.askReported(now, prev)
	if m.state == StateLeader {
		sortNodes(newcomers)
		for _, n := range newcomers {
			m.send(m.coordinator(n))
		}
	}
	m.stopAwaitingGone(now)
	m.rescheduleFirst(now)
}

// leaderDropped handles gossip's report that the followed leader failed.
// A follower that heard the leader's COORDINATOR, or a renewal of its
// term (Heard), less than Config.MinDetection ago keeps it until its next
// COORDINATOR is due, plus an election timeout for it to arrive (timeout
// forgets the leader then if gossip still does not list it); a leader
// announced again meanwhile is followed as one gossip does not list
// (follow). Any other node forgets it at once.
//
// A leader that really crashed, or was cut off from the member that
// reported it, stopped answering that member's probes at least a probe
// timeout and a suspicion timeout before the report, and its last
// COORDINATOR here came no later than that: it is forgotten at once, as
// before. A leader heard more recently was reported wrongly: memberlist
// takes a member's death from anyone, and a node healed from a long
// isolation declares the members it could not reach failed one by one,
// some after the heal. The leader refutes within milliseconds; forgotten
// at once, the followers said "no leader" until an ELECTION round found
// it again (0.6-1.2 s, with the LAN timing, measured).
func (m *Machine) leaderDropped(now time.Time) {
	if m.state != StateFollower || now.Sub(m.heard) >= m.cfg.MinDetection {
		m.reported = reportedLeader{leader: m.leader, term: m.term, at: now}
		m.forgetLeader(now, "gossip reports it failed")
		return
	}
	next := m.announceOverdue()
	if m.deadline.IsZero() || next.Before(m.deadline) {
		m.deadline = next
	}
}

// announceOverdue is when the followed leader's next COORDINATOR is
// overdue: an announce interval after the last one and an election wait
// (the time a round trip may take) for it to arrive.
func (m *Machine) announceOverdue() time.Time {
	return m.heard.Add(m.cfg.AnnounceInterval + m.electionWait())
}

// askReported asks a leader this node forgot on gossip's report that it
// failed whether it still leads its term (the INFO of checkLeaderHeard),
// as soon as gossip lists it live again within an announce interval and
// an election timeout of the report. Such a report was wrong: memberlist
// takes a member's death from anyone, a node healed from an isolation
// reports the members it could not reach, some after the heal, and the
// leader refutes it within milliseconds. A report leaderDropped believes
// (the leader was last heard longer ago than the detection floor: after a
// cut between the two, say) left the follower saying "no leader" until the
// leader's next COORDINATOR or an ELECTION round of its own found the
// leader again: 199 ms, 228 ms after a heal, in a local soak with no fault
// on. Asked, the leader answers within a round trip of the refutation's
// arrival. Later than that window, its next COORDINATOR is due anyway.
func (m *Machine) askReported(now time.Time, prev map[string]peer) {
	r := m.reported
	if r.leader.IsZero() {
		return
	}
	if now.Sub(r.at) > m.cfg.AnnounceInterval+m.cfg.ElectionTimeout {
		m.reported = reportedLeader{}
		return
	}
	if _, was := prev[r.leader.Name]; was || !m.isLive(r.leader) {
		return
	}
	m.reported = reportedLeader{}
	if !m.leader.IsZero() || m.lastLeader != r.leader || m.lastTerm != r.term {
		return // a leader, or a later term, was found meanwhile
	}
	m.send(Message{Type: MsgInfo, To: r.leader, Leader: r.leader, Term: r.term})
}

// rescheduleFirst moves a fresh Machine's first campaign to the startup
// delay plus one RankDelay per higher eligible live node it now knows, so
// that in a fleet that starts at once the highest node campaigns first and
// the others, and their reach probes, wait their turn. Campaigning at the
// end of the startup delay whatever the rank made every node of a
// 100-node fleet ask the highest three nodes and probe every voter in the
// same second (docs/BENCHMARKS.md).
//
// While gossip keeps revealing eligible members, the startup delay ends
// no sooner than half a startup delay after the last of them (and at most
// maxFirstDelay startup delays after the start). On a loaded host gossip
// spreads the joins of the last nodes of a fleet slowly: nodes that
// campaigned at the end of their startup delay did not yet list the
// dozen nodes above them, and one of them won, to be preempted by the
// highest seconds later.
func (m *Machine) rescheduleFirst(now time.Time) {
	if m.first == nil {
		return
	}
	if m.state != StateFollower || !m.leader.IsZero() || !m.cfg.Self.Eligible || !m.deadline.Equal(m.first.at) {
		m.first = nil // a leader, or another timer, took over
		return
	}
	k := time.Duration(len(m.higher(now)))
	base := m.first.start.Add(m.cfg.StartupDelay)
	if settled := m.first.grew.Add(m.cfg.StartupDelay / 2); settled.After(base) {
		base = settled
		if last := m.first.start.Add(maxFirstDelay * m.cfg.StartupDelay); base.After(last) {
			base = last
		}
	}
	m.deadline = base.Add(k*m.cfg.RankDelay + m.first.jitter)
	m.first.at = m.deadline
}

// maxFirstDelay bounds, in startup delays from the start, how long joins
// that keep coming put a fresh Machine's first campaign off (before its
// rank delay).
const maxFirstDelay = 3

// SetReach tells the Machine whether this node can lead as far as the
// driver knows: cutOff when it failed to reach a majority of the voters
// (it then neither campaigns nor answers ELECTIONs until told otherwise),
// and mayClaim when it has fresh proof that it reaches one (only then does
// it ask a lower leader to hand over). Without calls, a Machine is never
// cut off and may always claim.
func (m *Machine) SetReach(cutOff, mayClaim bool) {
	m.cutOff, m.mayClaim = cutOff, mayClaim && !cutOff
}

// Observe tells the Machine of an epoch seen outside its own messages (a
// lease request this node's voter answered, or the floor a voter
// reported): a term of its own then takes a later one. The driver bounds the epochs it passes as Step bounds those
// of messages (Config.MaxEpochJump).
func (m *Machine) Observe(e uint64) { m.observe(e) }

// ForgetClaims drops the claims of higher nodes this leader has heard: the
// driver calls it when the voter set changes, as a claim says the
// claimant reaches a majority of the voters it knew (see checkPreempt). A
// node that reached a majority of the old set may not reach one of the
// new, and a leader that yielded to it handed its term to a node that
// could not take it.
func (m *Machine) ForgetClaims() { clear(m.claims) }

// SetRoundTrip gives the Machine the driver's current estimate of how long
// a peer may take to answer a message: a retransmission timeout computed
// from measured round trips, as TCP does (smoothed round trip plus four
// times its variation). A campaign waits that long for an ANSWER when it
// is longer than Config.ElectionTimeout, up to Config.CoordinatorTimeout;
// a round of ELECTIONs in flight has its timer moved to match. On a
// saturated host peers answer in seconds, not milliseconds, and with a
// fixed timeout a node took the silence of live higher nodes for their
// absence and won, to be preempted once their answers came
// (docs/DESIGN.md, 11). Without calls the Machine waits ElectionTimeout.
func (m *Machine) SetRoundTrip(d time.Duration) {
	m.roundTrip = d
	if m.state == StateElecting && !m.deadline.IsZero() {
		m.deadline = m.asking.Add(m.electionWait())
	}
}

// electionWait is how long a round of ELECTIONs waits for an ANSWER: the
// election timeout, or the driver's round-trip estimate when longer, at
// most the coordinator timeout. A round that asks again after waiting in
// vain for the COORDINATOR of a node that answered waits the coordinator
// timeout: the nodes it asks were live a moment ago, most likely still
// deciding (backing off, or waiting out the last term's promises), and a
// round-trip estimate is a mean and four deviations, not a bound. A node
// whose higher node answered three such rounds in time and the fourth
// after the estimate took it for silent and won, to be preempted by it.
func (m *Machine) electionWait() time.Duration {
	if m.reasking {
		return m.cfg.CoordinatorTimeout
	}
	return min(max(m.cfg.ElectionTimeout, m.roundTrip), m.cfg.CoordinatorTimeout)
}

// Tick advances the Machine's timers to now.
func (m *Machine) Tick(now time.Time) {
	if !m.deadline.IsZero() && !now.Before(m.deadline) {
		m.deadline = time.Time{}
		m.timeout(now)
	}
	if m.state == StateLeader {
		m.checkPreempt(now)
	}
	if m.state == StateLeader && !now.Before(m.announce) {
		m.announceTerm(now)
	}
	m.checkLeaseEnd(now)
	m.checkLeaderHeard(now)
}

// checkLeaderHeard forgets a followed leader that has not announced itself
// for three announce intervals and does not answer when asked: gossip may
// still list it, but it no longer leads (its RESIGN was lost), and waiting
// on it would stall elections. While the voters are known to promise its
// term (LeaseEnds), the end of that promise decides instead.
//
// The follower asks first (an INFO naming the leader's own term, which a
// leader still leading it answers with its COORDINATOR) and forgets it
// only if no COORDINATOR came within CoordinatorTimeout. A cut that kept
// two announcements from the follower ended, and the first one after it
// came a little later than the last one heard had (over a new connection,
// its handshake first): forgotten at once, the leader was named "no
// leader" until that announcement arrived, though its term went on. The
// wait is the coordinator timeout, not the election wait, for the reason
// a repeated round waits it (electionWait): the node asked was live a
// moment ago and most likely still leads, and its answer may need a new
// connection whose first handshake packet a cut that just healed lost (a
// TCP retransmission, a second later). Waiting the election timeout, the
// follower forgot its leader 0.5 s after asking, a moment before the
// answer came (a LAN soak: "no leader" for 0.2-0.4 s after a one-way cut
// healed). While it waits, it asks again every election wait: a question
// sent during a cut is lost, and when the cut heals during the wait the
// next question is answered within a round trip, rather than the leader
// being forgotten at the end of the wait, just after the heal, and found
// again at its next announcement (the blips with no fault on left in a
// LAN soak after the change above, of 45 and 47 ms, named this rule). The
// wait still counts from the first question, so a leader that is really
// silent is forgotten no later.
func (m *Machine) checkLeaderHeard(now time.Time) {
	if m.state != StateFollower || m.leader.IsZero() || m.isSelf(m.leader) {
		return
	}
	if m.endPending(now) && m.end.leader == m.leader {
		// The voters still promise its term, as they reported it: the
		// node next in line acts when that ends (checkLeaseEnd), at once
		// and without asking the leader. Forgotten now, the leader, still
		// live to gossip, would be asked and waited for.
		return
	}
	switch {
	case now.Sub(m.heard) < 3*m.cfg.AnnounceInterval:
	case m.queried.Before(m.heard):
		m.queried = now
		m.askLeader(now)
	case now.Sub(m.queried) >= m.cfg.CoordinatorTimeout:
		m.forgetLeader(now, "no COORDINATOR from it for three announce intervals, nor when asked")
	case now.Sub(m.reasked) >= m.electionWait():
		m.askLeader(now)
	}
}

// askLeader sends the followed leader the question of checkLeaderHeard:
// an INFO naming its own term.
func (m *Machine) askLeader(now time.Time) {
	m.reasked = now
	m.send(Message{Type: MsgInfo, To: m.leader, Leader: m.leader, Term: m.term})
}

// Step processes a message from a peer and returns the reply to send back on
// the same exchange, if any (an ANSWER to an ELECTION).
func (m *Machine) Step(now time.Time, msg Message) *Message {
	if msg.From == m.cfg.Self.Node || m.jumps(msg.From, msg.Epoch) || m.jumps(msg.From, msg.Term) {
		return nil
	}
	m.heardFrom(now, msg.From)
	m.observe(msg.Epoch)
	m.observe(msg.Term)
	switch msg.Type {
	case MsgElection:
		return m.onElection(now, msg)
	case MsgAnswer:
		m.onAnswer(now, msg)
	case MsgCoordinator:
		return m.onCoordinator(now, msg)
	case MsgResign:
		m.onResign(now, msg)
	case MsgInfo:
		if m.state == StateLeader && m.isSelf(msg.Leader) && msg.Term == m.term {
			// A follower that has not heard this term announced for a
			// while asks whether it goes on (checkLeaderHeard).
			reply := m.stamp(m.coordinator(msg.From))
			return &reply
		}
		m.conflict(now, msg.Leader, msg.Term, false)
	}
	return nil
}

// Relayed tells the Machine that another member follows leader in term:
// second-hand news of a COORDINATOR, such as the roster a node that just
// joined fetches carries. A follower that knows no leader and has followed
// no later term follows it, if gossip lists it live; otherwise the news is
// dropped and the leader's own COORDINATOR settles it. A node that joins a
// fleet with a leader otherwise learns of it only once gossip has told the
// leader of the join and the leader's COORDINATOR has reached it: on a
// loaded host, seconds after the join.
func (m *Machine) Relayed(now time.Time, leader Node, term uint64) {
	if leader.IsZero() || m.isSelf(leader) || m.jumps(leader, term) {
		return
	}
	m.observe(term)
	if m.state != StateFollower || !m.leader.IsZero() || term <= m.lastTerm || !m.isLive(leader) {
		return
	}
	m.follow(now, leader, term)
}

// Heard tells the Machine that the leader it follows showed at now that
// it still leads term, by a message other than its COORDINATOR: a lease
// renewal it sent this node, a voter (renewals come several times per
// announce interval). Gossip's report that the leader failed is then
// taken for a wrong one as after a recent COORDINATOR (leaderDropped),
// and the leader is not asked whether it still leads (checkLeaderHeard).
// A voter that its leader renewed through throughout a ring believed
// gossip's late report of the leader's failure after the heal, its last
// COORDINATOR older than the detection floor: "no leader" for 138 ms with
// no fault on (TTL 1 s soak). News of another leader or term is ignored.
func (m *Machine) Heard(now time.Time, leader Node, term uint64) {
	if m.state == StateFollower && m.leader == leader && m.term == term && now.After(m.heard) {
		m.heard = now
	}
}

// jumps reports (and records, for Ready) an epoch e from n that is more
// than MaxEpochJump above the highest this node has seen.
func (m *Machine) jumps(n Node, e uint64) bool {
	if e <= m.epoch || e-m.epoch <= m.cfg.EpochJump() {
		return false
	}
	if e > m.ready.RefusedEpoch {
		m.ready.RefusedEpoch, m.ready.RefusedFrom = e, n
	}
	return true
}

// heardFrom takes a silent node back into elections: its stabilisation
// delay (for preemption) starts now.
func (m *Machine) heardFrom(now time.Time, n Node) {
	if _, ok := m.silent[n.Name]; !ok {
		return
	}
	delete(m.silent, n.Name)
	if p, ok := m.live[n.Name]; ok && p.Node == n {
		p.since = now
		m.live[n.Name] = p
	}
}

// markSilent leaves name out of this node's elections and natural
// hand-overs as silent, until a message from it comes (heardFrom) or two
// stabilisation delays pass.
func (m *Machine) markSilent(now time.Time, name string) {
	m.silent[name] = now.Add(2 * m.cfg.Stabilization)
}

// isSilent reports whether name is a silent node at now.
func (m *Machine) isSilent(name string, now time.Time) bool {
	until, ok := m.silent[name]
	return ok && now.Before(until)
}

// Acquired reports that the lease round for epoch succeeded. If the Machine
// no longer wants that term (a higher leader appeared meanwhile), it asks for
// the lease to be released instead.
func (m *Machine) Acquired(now time.Time, epoch uint64) {
	if m.state != StateAcquiring || epoch != m.acquiring {
		m.ready.Release, m.ready.Why = epoch, "no longer wanted: another leader appeared while it was acquired"
		return
	}
	m.acquiring, m.passed = 0, nil
	m.failures, m.retryAt = 0, time.Time{}
	m.state = StateLeader
	m.leader, m.term = m.cfg.Self.Node, epoch
	m.lastLeader, m.lastTerm = m.cfg.Self.Node, epoch
	m.end = leaseEnd{}
	m.ho.leads(epoch)
	m.announceTerm(now)
}

// announceTerm broadcasts the leader's COORDINATOR and sets the next one.
func (m *Machine) announceTerm(now time.Time) {
	m.broadcast(m.coordinator(Node{}))
	m.announce = now.Add(m.cfg.AnnounceInterval)
}

// coordinator is this leader's COORDINATOR for its term, to to.
func (m *Machine) coordinator(to Node) Message {
	return Message{Type: MsgCoordinator, To: to, Leader: m.cfg.Self.Node, Term: m.term, Chosen: m.ho.chosen}
}

// AcquireFailed reports that the lease round for epoch failed; seen is the
// highest epoch the voters reported, and wait how long until the promises
// that refused it run out. The node retries after that wait plus a random
// delay, unless a leader became known meanwhile.
func (m *Machine) AcquireFailed(now time.Time, epoch, seen uint64, wait time.Duration) {
	m.acquireFailed(now, epoch, seen, wait, false)
}

// AcquireCollided is AcquireFailed for a round that failed only because
// it collided with rounds of candidates ranked below this node: the
// voters that refused it had promised those candidates (wait is how long
// until their rounds can have ended and released the promises). Such
// candidates did not yet know of this node, as while a fleet starts and
// gossip is still spreading the joins. The node retries once their rounds
// can have ended, with jitter but without the backoff of AcquireFailed,
// for its first two failures in a row; the lower candidates back off as
// usual. So the highest of them goes first and wins, and they do not
// collide again.
func (m *Machine) AcquireCollided(now time.Time, epoch, seen uint64, wait time.Duration) {
	m.acquireFailed(now, epoch, seen, wait, true)
}

// maxCollidedRetries is how many failed rounds in a row AcquireCollided
// retries without backoff.
const maxCollidedRetries = 2

// maxTakingRetries is how many failed rounds in a row a node taking over
// a handed-over term retries soon, for the release on its way.
const maxTakingRetries = 2

func (m *Machine) acquireFailed(now time.Time, epoch, seen uint64, wait time.Duration, collided bool) {
	if !m.jumps(Node{}, seen) {
		m.observe(seen)
	}
	if m.state != StateAcquiring || epoch != m.acquiring {
		return
	}
	m.acquiring = 0
	m.state = StateFollower
	if m.isSelf(m.leader) {
		// A leader that started a term above another's (conflict) and
		// failed to win it no longer leads: it campaigns as any node
		// without a leader does. Before, it stayed a follower of itself,
		// which never campaigns.
		m.dropLeader("its lease round for a term above another's failed")
	}
	m.failures++
	delay := m.backoff()
	if (collided && m.failures <= maxCollidedRetries) || m.taking(now) {
		// Without backoff: rounds that collided with lower candidates',
		// and those of a node taking over a handed-over term, refused
		// for the old term's promises (its release lost, or not sent:
		// wait says when they end). The taking lasts a transfer window.
		delay = m.jitter()
	}
	m.retryAt = now.Add(wait + delay)
	switch {
	case !m.leader.IsZero():
	case m.taking(now) && m.failures <= maxTakingRetries:
		// A handed-over term's round is most often refused by voters whose
		// release from the old leader is still on its way: retry soon, a
		// few times. A release that never comes (lost, or not sent) is
		// waited out like a crashed leader's promises, not by a round,
		// and an epoch, every quarter second. Promises that end sooner
		// than the retry are waited out instead.
		d := m.cfg.ElectionTimeout/2 + m.jitter()
		if wait > 0 && wait < d {
			d = wait
		}
		m.ho.retry = now.Add(d)
		m.deadline = m.ho.retry
	default:
		m.deadline = m.retryAt
	}
	m.followPassed(now)
}

// followPassed handles, as if it arrived now, the COORDINATOR of a leader
// that this node passed over while its own round was in flight:
// the round failed, most often because the voters promised that leader,
// and waiting for its next announcement left this node (the highest
// candidate of a fleet that starts together, typically) the last to know
// the leader, a whole AnnounceInterval after the others.
func (m *Machine) followPassed(now time.Time) {
	msg := m.passed
	m.passed = nil
	if msg == nil || !m.leader.IsZero() {
		return
	}
	if reply := m.onCoordinator(now, *msg); reply != nil {
		m.send(*reply)
	}
}

// maxBackoff caps the doubling of the retry delay: at most this many
// RetryDelays after a run of failed lease rounds.
const maxBackoff = 8

// backoff is the delay before the next lease round after m.failures failed
// ones in a row: RetryDelay doubled per failure after the first, up to
// maxBackoff RetryDelays, half of it random so that candidates spread out.
// Each round takes a new epoch, so a node whose rounds keep failing (its
// voters promised a leader it cannot see, or are restarting) must not burn
// epochs at the pace of the first retry.
func (m *Machine) backoff() time.Duration {
	d := m.cfg.RetryDelay << min(m.failures-1, 3)
	d = min(d, maxBackoff*m.cfg.RetryDelay)
	return d/2 + m.randDuration(d/2)
}

// LeaseLost reports that the lease of term epoch ended without renewal. The
// node stops leading, tells the others, and campaigns again for a new term.
func (m *Machine) LeaseLost(now time.Time, epoch uint64) {
	if m.state != StateLeader || m.term != epoch {
		return
	}
	m.stepDown(now, "the lease ran out without renewal")
}

// Resign makes the leader stop leading, release its lease and stay out of
// elections for cfg.ResignHold: ResignWith with no hold or successor given.
func (m *Machine) Resign(now time.Time) error { return m.ResignWith(now, Handover{}) }
