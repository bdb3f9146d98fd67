package agent

import (
	"slices"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/internal/broken"
	"github.com/tenurehq/tenure/leasing"
)

// rounds are this node's lease rounds, as candidate and as leader.
type rounds struct {
	seq     uint64         // last lease round number
	current *leasing.Round // acquire or renew round in flight
	// late are the leader's renewal rounds of its term that ran out of
	// budget and could still extend its lease, oldest first: answers that
	// come later still count (addLateRenewal). At most maxLateRounds.
	late []*leasing.Round
	// grants is, for each voter, when the latest request of this term it
	// granted was sent: the lease holds until the majority-th latest of
	// them plus the validity (extendByGrants), whatever their rounds.
	grants grantLog
	// abandoned are this node's recent acquire rounds that failed, by
	// epoch, for releaseLateGrant.
	abandoned map[uint64]abandonedRound
	quorum    leasing.Quorum // as of the last round
	noQuorum  string         // why the last acquire failed, "" when it did not
}

// acquire runs the lease round that gates a won election. Available mode
// grants at once.
func (c *core) acquire(now time.Time, epoch uint64) {
	if !c.quorumMode() {
		c.lease.epoch = epoch
		c.m.Acquired(now, epoch)
		return
	}
	r := c.roster()
	if r.IsZero() {
		c.rounds.noQuorum = errNoRoster.Error()
		c.m.AcquireFailed(now, epoch, 0, 0)
		return
	}
	c.startRound(now, leasing.Acquire, epoch, r)
}

// startRound sends a round's request to every voter; this node's own vote,
// if it is one, is cast at once. An acquire waits peerWait for a majority,
// a renewal the acquire budget: a leader retries a failed renewal every
// quarter of a renewal interval, and waiting longer left it fewer tries
// before its deadline, which lost terms when messages were lost rather
// than slow. A renewal's answers that come after its budget still count
// (addLateRenewal).
func (c *core) startRound(now time.Time, kind leasing.Kind, epoch uint64, r leasing.Roster) {
	c.rounds.seq++
	budget := c.cfg.Lease.AcquireBudget
	if kind == leasing.Acquire {
		budget = c.peerWait(now)
	}
	c.rounds.current = leasing.NewRound(c.rounds.seq, kind, epoch, r, now, budget)
	c.rounds.grants.begin(epoch, r)
	req := c.rounds.current.Request(toLeasing(c.cfg.Self), c.cfg.Lease.TTL)
	req.Instance, req.Previous = c.cfg.Instance, c.cfg.Previous
	if kind == leasing.Acquire {
		req.Relayed = c.relayFor(now, epoch)
	}
	for _, v := range r.Members() {
		if toBully(v) == c.cfg.Self {
			c.addTo(c.rounds.current, c.vote(now, req))
			continue
		}
		c.out = append(c.out, outMsg{to: toBully(v), env: envelope{Lease: &req}})
	}
	c.evaluate(now)
}

// dispatched tells the core that the messages it queued went to the
// transport at now (the driver calls it after each flush): the budget of
// a round whose requests were among them counts from now. A candidate
// persists its epoch between starting the round and sending it; while
// 100 agents started on one host that write (an fsync) took 0.06-0.46 s
// of the 1 s budget, and rounds failed with no reply from any voter,
// burning the epoch and racing the other candidates.
func (c *core) dispatched(now time.Time) {
	if c.rounds.current != nil {
		c.rounds.current.Dispatched(now) // only the first flush after the round started counts
	}
}

// addReply counts a voter's reply in the round in flight; a grant for an
// acquire round that failed earlier is released (releaseLateGrant).
func (c *core) addReply(now time.Time, rep leasing.Reply) {
	if i := slices.IndexFunc(c.rounds.late, func(rd *leasing.Round) bool { return rd.Seq == rep.Seq }); i >= 0 {
		c.addLateRenewal(now, i, rep)
		return
	}
	if c.rounds.current == nil || rep.Seq != c.rounds.current.Seq {
		c.releaseLateGrant(rep)
		return
	}
	c.addTo(c.rounds.current, rep)
	if c.rounds.current.Kind == leasing.Renew && !c.rounds.current.Won() {
		c.extendByGrants(now) // with grants to earlier rounds, a majority
	}
	c.evaluate(now)
}

// addTo counts rep in round rd, and a grant in the term's grant log.
func (c *core) addTo(rd *leasing.Round, rep leasing.Reply) {
	if rd.Add(rep) {
		c.rounds.grants.add(rd, rep.Voter)
	}
}

// grantLog records, for one term under one roster, when each voter's
// latest granted request was sent. Each such grant promised a TTL from
// the voter's receipt of its request, after the send: a majority of
// voters that each granted a request sent at or after S promises the
// leader until S plus the validity, whichever rounds those requests
// belonged to.
type grantLog struct {
	epoch  uint64
	roster string
	sent   map[string]time.Time // by voter name
}

// begin readies the log for a round of epoch under r; grants recorded for
// another term or roster are dropped.
func (g *grantLog) begin(epoch uint64, r leasing.Roster) {
	if key := r.String(); g.epoch != epoch || g.roster != key || g.sent == nil {
		*g = grantLog{epoch: epoch, roster: key, sent: map[string]time.Time{}}
	}
}

// add records v's grant of rd's request, if rd is of the log's term and
// roster.
func (g *grantLog) add(rd *leasing.Round, v leasing.Node) {
	if rd.Epoch != g.epoch || rd.Roster.String() != g.roster {
		return
	}
	if t, ok := g.sent[v.Name]; !ok || rd.Sent.After(t) {
		g.sent[v.Name] = rd.Sent
	}
}

// majoritySent is the latest send time S such that a majority of r (of
// both sets of a joint roster) granted requests sent at S or later, with
// their count against the majority needed; false when no majority has
// granted anything of the term.
func (g *grantLog) majoritySent(r leasing.Roster) (time.Time, leasing.Quorum, bool) {
	var best time.Time
	found := false
	since := func(s time.Time) func(leasing.Node) bool {
		return func(n leasing.Node) bool { t, ok := g.sent[n.Name]; return ok && !t.Before(s) }
	}
	for _, s := range g.sent {
		if (!found || s.After(best)) && r.Satisfied(since(s)) {
			best, found = s, true
		}
	}
	if !found {
		return time.Time{}, leasing.Quorum{}, false
	}
	return best, r.Count(since(best)), true
}

// abandonedRound is an acquire round of this node that failed: the
// release sent at its end went to every voter of its roster.
type abandonedRound struct {
	seq    uint64 // its requests' number: a reply to a release carries none
	at     time.Time
	roster leasing.Roster
}

// releaseLateGrant answers a grant that arrives after its acquire round
// failed with another release to that voter. The release sent when the
// round failed either reached the voter first, and the late acquire was
// then refused (its epoch under the released floor), or came after the
// grant and dropped it, or was lost: then the voter holds a promise to a
// round nobody will use for a whole TTL, and refuses every other
// candidate meanwhile. While 100 agents started on two cores, releases
// were lost to connections that took longer than a call to set up, and
// the highest candidate, refused by three voters promised elsewhere,
// waited 6 s. Only epochs of this node's own failed acquires qualify: a
// renewal's grant belongs to a term, whose release waits for its local
// work (stopwait.go), and a voter drops a promise only for the very
// holder and epoch it names.
func (c *core) releaseLateGrant(rep leasing.Reply) {
	ab, ok := c.rounds.abandoned[rep.Epoch]
	if !ok || !rep.Granted || rep.Seq != ab.seq || !ab.roster.Contains(rep.Voter) {
		return
	}
	c.count("lease.late_grant_released")
	c.log.Debug("releasing a grant that came after its round failed", "voter", rep.Voter.Name, "epoch", rep.Epoch)
	req := c.releaseRequest(rep.Epoch, ab.roster)
	c.out = append(c.out, outMsg{to: toBully(rep.Voter), env: envelope{Lease: &req}})
}

// abandon records a failed acquire round for releaseLateGrant, and forgets
// those whose promises have run out by now.
func (c *core) abandon(now time.Time, rd *leasing.Round) {
	if c.rounds.abandoned == nil {
		c.rounds.abandoned = map[uint64]abandonedRound{}
	}
	for e, ab := range c.rounds.abandoned {
		if now.Sub(ab.at) > abandonedFor*c.cfg.Lease.TTL {
			delete(c.rounds.abandoned, e)
		}
	}
	c.rounds.abandoned[rd.Epoch] = abandonedRound{seq: rd.Seq, at: now, roster: rd.Roster}
}

// abandonedFor is how many of this node's TTLs a failed acquire's late
// grants are still released: the promise they made runs one TTL from the
// grant, and the grant may come late; three covers a grant held up as long
// as the promise itself, with room.
const abandonedFor = 3

// evaluate concludes the round in flight once it is won or lost.
func (c *core) evaluate(now time.Time) {
	rd := c.rounds.current
	if rd == nil {
		return
	}
	won := rd.Won() || broken.Is(broken.SkipMajority)
	if !won && !rd.Lost(now) {
		return
	}
	c.rounds.current = nil
	if rd.Kind == leasing.Acquire || rd.Epoch == c.lease.epoch {
		c.rounds.quorum = rd.Quorum() // not a renewal of a term that has ended
	}
	if newer, ok := rd.NewerRoster(); ok {
		c.adoptNewer(now, newer)
	}
	switch {
	case rd.Kind == leasing.Acquire && won:
		c.rounds.noQuorum = ""
		c.lease.epoch = rd.Epoch
		c.extend(rd)
		c.count("lease.acquired")
		c.m.Acquired(now, rd.Epoch)
		c.lease.acting = c.leading() // an unwanted term is released at once
		if c.lease.acting {
			c.startTable(now, rd)
		}
	case rd.Kind == leasing.Acquire:
		c.count("lease.acquire_failed")
		c.acquireFailed(now, rd)
		c.sendRelease(now, rd.Epoch, rd.Roster)
		c.abandon(now, rd)
		if c.collidedBelow(rd) {
			c.m.AcquireCollided(now, rd.Epoch, rd.Highest(), rd.RetryAfter())
		} else {
			c.m.AcquireFailed(now, rd.Epoch, rd.Highest(), rd.RetryAfter())
		}
	case rd.Epoch != c.lease.epoch:
		// A renewal of a term that has ended meanwhile.
	case won:
		c.extend(rd)
		c.rounds.late = nil
		c.count("lease.renewed")
	default:
		c.count("lease.renew_failed")
		c.renewalFailed(now, rd)
		c.keepLate(rd)
		c.lease.renewAt = now.Add(c.cfg.Lease.RenewInterval() / 4)
	}
}

// maxLateRounds bounds the renewal rounds kept for late answers. Only
// rounds whose validity would end after the lease's are kept, so a round
// older than the lease's validity never is: with a retry every budget and
// a quarter of a renewal interval, the default timings keep at most six.
const maxLateRounds = 16

// keepLate adds rd, a renewal round that ran out of budget, to the rounds
// whose late answers still count, and drops those that can no longer
// extend the lease (of another term, or whose validity ends by the
// lease's deadline), and the oldest beyond maxLateRounds.
func (c *core) keepLate(rd *leasing.Round) {
	c.rounds.late = append(c.rounds.late, rd)
	c.pruneLate()
	c.rounds.late = c.rounds.late[max(0, len(c.rounds.late)-maxLateRounds):]
}

// pruneLate drops the kept renewal rounds that can no longer extend the
// lease: of another term, or whose validity ends by its deadline.
func (c *core) pruneLate() {
	c.rounds.late = slices.DeleteFunc(c.rounds.late, func(r *leasing.Round) bool {
		return r.Epoch != c.lease.epoch || !c.cfg.Lease.LeaderDeadline(r.Sent).After(c.lease.deadline)
	})
}

// addLateRenewal counts an answer to c.rounds.late[i], a renewal round of
// the leader that ran out of budget (extendByGrants). While voters answer
// in more than a budget (a loaded host: 0.6-1.4 s against the LAN
// profile's 1 s), every renewal ran out before its majority came, and the
// leader lost a term it held. Every round that ran out counts, not only
// the last: the leader retries every budget and a quarter of a renewal
// interval (0.37 s with the local profile), and with round trips of
// 0.5-1.1 s the answers to each round came after the next had run out
// too, and the lease ended with a majority granting every renewal.
func (c *core) addLateRenewal(now time.Time, i int, rep leasing.Reply) {
	c.addTo(c.rounds.late[i], rep)
	c.extendByGrants(now)
}

// extendByGrants extends the lease of the term led to the end of validity
// counted from the majority-th latest grant of the term (grantLog), when
// that is later than its deadline: as safe as an on-time win, since a
// majority each promised a TTL from after that send. Only under the
// roster still current. A majority of one round's grants is an on-time
// win (evaluate); this counts those of rounds that ran out of budget
// (c.rounds.late), alone or with the round in flight. Counted only by
// round, a leader whose every voter granted within a TTL could still
// lose its lease: with one follower's answer of each round arriving, a
// different one each time, no round had a majority
// (TestGrantsAcrossRoundsKeepTheLease).
func (c *core) extendByGrants(now time.Time) {
	g := &c.rounds.grants
	if g.epoch != c.lease.epoch || !c.leading() || g.roster != c.roster().String() {
		return
	}
	sent, quorum, ok := g.majoritySent(c.roster())
	end := c.cfg.Lease.LeaderDeadline(sent)
	if !ok || !end.After(c.lease.deadline) || !now.Before(end) {
		return
	}
	renewAt := c.lease.renewAt
	c.extendFrom(c.roster(), sent)
	if renewAt.Before(c.lease.renewAt) {
		c.lease.renewAt = renewAt // a retry already due stays due
	}
	c.pruneLate()
	c.rounds.quorum = quorum
	c.count("lease.renewed_late")
	c.log.Debug("lease renewed by late answers", "epoch", c.lease.epoch, "remaining", end.Sub(now),
		"granted", quorum.Have, "need", quorum.Need)
}

// extend moves the lease deadline to the end of validity counted from when
// the won round's requests were sent.
func (c *core) extend(rd *leasing.Round) { c.extendFrom(rd.Roster, rd.Sent) }

// extendFrom moves the lease deadline, under roster r, to the end of
// validity counted from sent, and the next renewal a renewal interval
// after it.
func (c *core) extendFrom(r leasing.Roster, sent time.Time) {
	c.lease.roster = r
	c.lease.deadline = c.cfg.Lease.LeaderDeadline(sent)
	c.lease.renewAt = sent.Add(c.cfg.Lease.RenewInterval())
}

// checkLease ends a term whose deadline passed, starts renewals, and
// concludes a round whose budget ran out.
func (c *core) checkLease(now time.Time) {
	c.evaluate(now)
	if c.stopping != nil && !now.Before(c.stopping.deadline) {
		c.giveUpStop() // the promises run out by themselves now
	}
	if !c.quorumMode() || c.lease.epoch == 0 || !c.leading() {
		return
	}
	if !now.Before(c.lease.deadline) && broken.Is(broken.RenewPastDeadline) {
		c.lease.deadline = c.cfg.Lease.LeaderDeadline(now)
	}
	if !now.Before(c.lease.deadline) {
		c.log.Warn("lease expired without renewal: stepping down", "epoch", c.lease.epoch)
		c.count("lease.expired")
		epoch := c.lease.epoch
		c.lease.epoch, c.rounds.quorum = 0, leasing.Quorum{}
		c.m.LeaseLost(now, epoch)
		return
	}
	if c.rounds.current == nil && !now.Before(c.lease.renewAt) {
		c.startRound(now, leasing.Renew, c.lease.epoch, c.roster())
	}
}

// release drops the lease of epoch, telling the voters so the next leader
// need not wait for the promises to expire. A term this node led with a
// lease still valid ends in two steps: it stops leading now (status,
// events), and the release waits until the driver reports that local work
// for the term has stopped (stopped), so the next leader's work cannot start
// while this node's still runs. A term that never led (a lost or unwanted
// acquire) releases at once.
func (c *core) release(now time.Time, epoch uint64) {
	deferred := false
	if c.lease.epoch == epoch {
		deferred = c.quorumMode() && c.lease.acting && now.Before(c.lease.deadline)
		if deferred {
			c.giveUpStop()
			c.stopping = &pendingStop{epoch: epoch, roster: c.lease.roster, deadline: c.lease.deadline,
				held: c.holdResign(epoch)}
		}
		c.lease.epoch, c.lease.acting = 0, false
		c.lease.deadline, c.rounds.quorum = time.Time{}, leasing.Quorum{}
	}
	if c.rounds.current != nil && c.rounds.current.Epoch == epoch {
		c.rounds.current = nil
	}
	if c.quorumMode() && !deferred {
		c.sendRelease(now, epoch, c.roster())
	}
}

// pendingStop is a term this node stopped leading whose release waits for
// the local work of the term (tenure run children, hooks) to stop. The
// term's RESIGN waits with it: sent at once, it made the next leader
// campaign against voters still promising this node, be refused, and
// retry about a second later.
type pendingStop struct {
	epoch    uint64
	roster   leasing.Roster
	deadline time.Time // the term's lease deadline: no release is needed after it
	held     []outMsg  // the term's RESIGN messages
}

// holdResign takes the RESIGN messages of term epoch out of those queued.
func (c *core) holdResign(epoch uint64) []outMsg {
	var held []outMsg
	c.out = slices.DeleteFunc(c.out, func(m outMsg) bool {
		b := m.env.Bully
		if b == nil || b.Type != bully.MsgResign || b.Term != epoch {
			return false
		}
		held = append(held, m)
		return true
	})
	return held
}

// giveUpStop drops the pending stop without a release (its deadline
// passed, or a later term ended): its RESIGN goes out alone.
func (c *core) giveUpStop() {
	if p := c.stopping; p != nil {
		c.out = append(c.out, p.held...)
		c.stopping = nil
	}
}

// stopPending returns the epoch of a term whose release waits for stopped.
func (c *core) stopPending() (uint64, bool) {
	if c.stopping == nil {
		return 0, false
	}
	return c.stopping.epoch, true
}

// stopped reports that the local work of term epoch has stopped: the
// release goes out now, with the term's RESIGN. A report for another term
// is ignored.
func (c *core) stopped(now time.Time, epoch uint64) {
	p := c.stopping
	if p == nil || p.epoch != epoch {
		return
	}
	c.stopping = nil
	c.out = append(c.out, p.held...)
	c.sendRelease(now, epoch, p.roster)
}

// sendRelease sends this node's release of epoch to the voters of r, and
// with every RESIGN of that term queued, for the successor to relay
// (relayed).
func (c *core) sendRelease(now time.Time, epoch uint64, r leasing.Roster) {
	if broken.Is(broken.NoRelease) {
		return
	}
	req := c.releaseRequest(epoch, r)
	for _, v := range r.Members() {
		if toBully(v) == c.cfg.Self {
			c.vote(now, req)
			continue
		}
		c.out = append(c.out, outMsg{to: toBully(v), env: envelope{Lease: &req}})
	}
	rel := &leasing.Released{Holder: toLeasing(c.cfg.Self), Epoch: epoch}
	for i, m := range c.out {
		if b := m.env.Bully; b != nil && b.Type == bully.MsgResign && b.Term == epoch {
			c.out[i].env.Released = rel
		}
	}
}

// relayed is the release of a resigned leader's term, received with its
// RESIGN, that this node relays with its acquire requests
// (leasing.Request.Relayed) until the promises it frees have run out
// anyway. A resigning leader sends its release to the voters and its
// RESIGN to the others at the same instant, each over its own connection;
// on a loaded host the RESIGN reached the successor and the successor's
// acquire reached the voters before the release did, and the voters,
// still promising the old leader, refused it: the hand-over then took a
// retry and an epoch more. Relayed, the release reaches each voter with
// the acquire itself.
type relayed struct {
	rel   leasing.Released
	until time.Time
}

// receiveRelease takes note of the release a RESIGN carries from the
// leader of the term it ends: this node applies it to its own vote at
// once, as the release sent to it would be, and relays it (relayFor).
func (c *core) receiveRelease(now time.Time, m bully.Message, rel *leasing.Released) {
	if rel == nil || m.Type != bully.MsgResign || rel.Holder != toLeasing(m.From) || rel.Epoch != m.Term {
		return
	}
	if c.grants != nil {
		c.vote(now, rel.Request())
	}
	if rel.Epoch >= c.relay.rel.Epoch {
		c.relay = relayed{rel: *rel, until: now.Add(c.cfg.Lease.TTL)}
	}
}

// relayFor is the release an acquire of epoch relays: the last one handed
// to this node with a RESIGN, for an earlier term, while its promises may
// still run.
func (c *core) relayFor(now time.Time, epoch uint64) *leasing.Released {
	if r := c.relay; r.rel.Valid() && r.rel.Epoch < epoch && now.Before(r.until) {
		return &r.rel
	}
	return nil
}

// releaseRequest is this node's release of epoch, under roster r.
func (c *core) releaseRequest(epoch uint64, r leasing.Roster) leasing.Request {
	return leasing.Request{Kind: leasing.Release, Candidate: toLeasing(c.cfg.Self), Epoch: epoch,
		ClusterID: r.ClusterID, RosterVersion: r.Version, RosterEpoch: r.Epoch,
		Instance: c.cfg.Instance, Previous: c.cfg.Previous}
}

// leading reports whether the machine is in the leader state.
func (c *core) leading() bool { return c.m.Status().State == bully.StateLeader }

// leaseValid reports whether this node leads with a valid lease at now: the
// only question that decides whether it may act as leader.
func (c *core) leaseValid(now time.Time) bool {
	if !c.leading() {
		return false
	}
	return !c.quorumMode() || now.Before(c.lease.deadline)
}

// leaseRemaining is how long the lease still runs (0 when not leading or in
// available mode, which has no lease).
func (c *core) leaseRemaining(now time.Time) time.Duration {
	if !c.quorumMode() || !c.leaseValid(now) {
		return 0
	}
	return c.lease.deadline.Sub(now)
}

// collidedBelow reports whether a failed acquire lost only to candidates
// ranked below this node: every refusal was for a promise to a lower node
// or for an epoch another round took first, and at least one was a
// promise. Any other refusal (a restarting voter, another roster) or a
// promise to a higher node is an ordinary failure.
func (c *core) collidedBelow(rd *leasing.Round) bool {
	for reason := range rd.Refusals() {
		if reason != leasing.ReasonPromised && reason != leasing.ReasonStaleEpoch {
			return false
		}
	}
	holders := rd.PromisedTo()
	for _, h := range holders {
		if !toBully(h).Less(c.cfg.Self) {
			return false
		}
	}
	return len(holders) > 0
}
