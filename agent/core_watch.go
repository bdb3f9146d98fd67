package agent

import (
	"slices"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/leasing"
)

// leaseWatch is how the natural successor learns that the leader stopped
// renewing, from the voters rather than from gossip. The node the election
// would pick once the leader is gone (bully.Machine.NextInLine) asks the
// voters, with the FloorQuery of the reach probe, how their promise stands
// (promiseView): just after each renewal of the leader is due, and every
// quarter of a renewal interval while one is overdue. From the answers it
// computes the instant a majority of the roster is free to grant a new
// term and tells the election (bully.Machine.LeaseEnds), which campaigns
// at that instant if no renewal was seen meanwhile. A crashed or
// frozen leader is thus succeeded as its last promises end, not when
// gossip declares it failed (about 5 s on a LAN) or three announcements
// are missed. Only that one node watches, with one query per voter per
// renewal interval, so the cost does not grow with the fleet.
type leaseWatch struct {
	leader bully.Node // the term watched
	term   uint64
	// released: a voter (this node's own, or one that answered) took the
	// leader's release of the term. It is handing over (resign, transfer,
	// drain, a lost lease), and its RESIGN, sent with the release, decides
	// who follows: the watch does not act.
	released bool
	// selfPromised: this node's own voter promised the term (as
	// sighting.promised).
	selfPromised bool
	next         time.Time // the next query
	sent         time.Time // the last query went out at
	// heard is when the leader last announced the term (a COORDINATOR):
	// it was running then, and may have renewed the voters' promises
	// after they answered. Near the end they are asked again at once
	// (heardNearEnd), and until recheck, when their answers are due, the
	// end told to the election is no earlier than that.
	heard, recheck time.Time
	seen           map[string]sighting // each voter's latest answer, for this term
	end            time.Time           // the end last told to the election
	told           bool                // the end's passing was logged
}

// sighting is a voter's answer to the watch, on this node's clock.
type sighting struct {
	at      time.Time // when the answer came
	free    time.Time // from when the voter may grant a new term
	renewed time.Time // when the watched leader last renewed it; zero when it does not promise the leader
	// promised: this voter was seen promising the watched term, in this
	// answer or an earlier one. Only such voters count towards the end: a
	// voter that never did may have answered before the term reached it
	// (a reply overtaken by the leader's acquire), and says nothing of
	// when the term's promises end.
	promised bool
}

// promiseView is a voter's promise as it reports it in a floorReply, for
// the watch of the natural successor: the term it promises (zero when
// none), how long until it may grant a new term (its promise and restart
// hold over), how long ago the holder's last request was granted, and the
// last term its holder released. Durations are on the voter's clock.
type promiseView struct {
	Holder       bully.Node    `msgpack:"holder,omitempty"`
	Term         uint64        `msgpack:"term,omitempty"`
	FreeIn       time.Duration `msgpack:"free_in,omitempty"`
	Renewed      time.Duration `msgpack:"renewed,omitempty"`
	Released     bully.Node    `msgpack:"released,omitempty"`
	ReleasedTerm uint64        `msgpack:"released_term,omitempty"`
}

// promiseView reports this voter's promise; nil when this node has no vote
// to give (not a voter, or an amnesiac one, which does not know when it may
// grant).
func (c *core) promiseView(now time.Time) *promiseView {
	if c.grants == nil || c.amnesia.active {
		return nil
	}
	st := c.grants.Standing(now)
	pv := &promiseView{FreeIn: st.Free.Sub(now), Released: toBully(st.Released), ReleasedTerm: st.ReleasedEpoch}
	if !st.Holder.IsZero() {
		pv.Holder, pv.Term, pv.Renewed = toBully(st.Holder), st.Epoch, now.Sub(st.Granted)
	}
	return pv
}

// watchLease runs the natural successor's watch (see leaseWatch): it
// starts or drops the watch as this node's place in line changes, sends a
// query when one is due, and tells the election the end as the answers
// still fresh put it.
func (c *core) watchLease(now time.Time) {
	w := &c.watch
	since, froze := c.ownFreeze(now)
	l, term, ok := c.m.NextInLine(now)
	if !ok || !c.quorumMode() || c.roster().IsZero() {
		if w.term != 0 {
			*w = leaseWatch{}
			c.m.LeaseEnds(now, bully.Node{}, 0, time.Time{})
		}
		return
	}
	if w.leader != l || w.term != term {
		*w = leaseWatch{leader: l, term: term, next: now, seen: map[string]sighting{}}
	}
	if froze {
		c.forgetAnswers(now, since)
	}
	if c.grants != nil {
		st := c.grants.Standing(now)
		w.selfPromised = w.selfPromised || (st.Holder == toLeasing(l) && st.Epoch == term)
		// This node's own voter took the leader's release: the term is
		// being handed over, as when another voter reports it
		// (noteSighting).
		w.released = w.released || (st.Released == toLeasing(l) && st.ReleasedEpoch >= term)
	}
	if again := c.heardNearEnd(now); again || !now.Before(w.next) {
		if again {
			w.recheck = now.Add(c.peerWait(now))
		}
		w.sent = now
		w.next = now.Add(c.cfg.Lease.RenewInterval() / 4) // unless answers say when
		c.askFloors()
	}
	c.tellEnd(now)
	if pre := w.end.Add(-c.preEndWait(now)); !w.end.IsZero() && pre.After(w.sent) && pre.Before(w.next) {
		// Ask once more so the answers come just before the end: a
		// leader that woke from a freeze since the last answers renews
		// at once, and the end moves. On the older answers the election
		// dropped that leader at the end, and this node said "no
		// leader" until its next announcement (2.1 s, LAN timing, in the
		// fault harness).
		w.next = pre
	}
	if !w.end.IsZero() && !now.Before(w.end) && !w.told {
		w.told = true
		c.log.Info("the leader stopped renewing: the voters' promises to its term have run out; campaigning as the node next in line",
			"leader", w.leader.Name, "term", w.term)
	}
}

// ownFreeze reports whether this node was frozen (a long GC pause, a
// stopped VM or process) since its last tick, and when that tick was: its
// ticks stopped for longer than freezeGap. It records now as the last
// tick, and as the wake-up when it was.
func (c *core) ownFreeze(now time.Time) (time.Time, bool) {
	last := c.ticked
	c.ticked = now
	froze := !last.IsZero() && now.Sub(last) > c.freezeGap()
	if froze {
		c.woke = now
	}
	return last, froze
}

// wakeHorizon is how long after a freeze of its own this node says so in
// its answers (stampWake): longer than any peer call waits.
const wakeHorizon = time.Minute

// stampWake marks reply, this node's answer at now, with how long ago this
// node woke from a freeze of its own, if within wakeHorizon, or as just
// woken when its ticks have stopped for longer than freezeGap (the tick
// that will find the freeze has not run yet). A caller whose call began
// before that wake-up waited on the freeze, and leaves the call out of
// its round-trip estimate: the answers this node's kernel held through a
// freeze of 1-1.5 s raised the others' estimates from the simulation's
// 50-110 ms round trips past 600 ms (0.61-1.96 s) in 98 of 100 runs of
// TestFrozenPeerIsNoRoundTrip.
func (c *core) stampWake(now time.Time, reply *envelope) {
	switch {
	case !c.ticked.IsZero() && now.Sub(c.ticked) > c.freezeGap():
		reply.WokeMS = 1
	case !c.woke.IsZero() && now.Sub(c.woke) < wakeHorizon:
		reply.WokeMS = uint32(now.Sub(c.woke)/time.Millisecond) + 1
	}
}

// freezeGap is the longest this node's ticks may stop without it being
// taken for frozen: twice the longest the driver sleeps, and at least
// half a renewal interval.
func (c *core) freezeGap() time.Duration {
	return max(2*c.cfg.IdleTick, c.cfg.Lease.RenewInterval()/2)
}

// spansOwnFreeze reports whether a peer call answered at now after took
// was in flight while this node was frozen: sent before the last wake-up,
// or answered while the driver has not ticked for longer than freezeGap
// (a wake-up its next tick will find). Its round trip then counts the
// freeze.
func (c *core) spansOwnFreeze(now time.Time, took time.Duration) bool {
	stalled := !c.ticked.IsZero() && now.Sub(c.ticked) > c.freezeGap()
	return stalled || now.Add(-took).Before(c.woke)
}

// forgetAnswers drops from the end the answers the watch had before this
// node froze at since, and asks the voters again at once. The leader may
// have renewed their promises any number of times meanwhile, and the end
// those answers put may have passed during the freeze: acting on it, the
// node next in line woke to drop a leader that had renewed all along,
// said "no leader" and sent a lease round the voters refused (the fault
// harness, TTL 1 s, seed 7168: 13 ms after its own pause;
// TestWatchersOwnFreezeKeepsTheTerm). Until the new answers come, the
// election is told the end is unknown, and does not act on it. Answers
// read since the wake stay: those its kernel held through the freeze
// report on the voter's clock a promise measured when they answered, so
// the end they put is later than the true one, never earlier. A voter
// keeps its mark of having promised the term.
func (c *core) forgetAnswers(now, since time.Time) {
	w := &c.watch
	for name, s := range w.seen {
		if !s.at.After(since) {
			s.at = time.Time{}
			w.seen[name] = s
		}
	}
	w.next = now
	if !w.end.IsZero() {
		w.end = time.Time{}
		c.m.LeaseEnds(now, w.leader, w.term, time.Time{})
	}
	c.log.Debug("lease watch: this node was frozen; asking the voters again", "leader", w.leader.Name, "term", w.term,
		"frozen", now.Sub(since))
}

// heardNearEnd reports whether the leader announced its term after the
// last query went out, with the end the answers put so near that the
// pre-end query is due before the next one: then the watch asks again at
// once. A leader that wakes from a freeze long enough for gossip to drop
// it announces at once, and its answers to the queries sent to it while
// it was frozen come in late (its kernel held them); their round trips of
// up to a second stretched preEndWait to a quarter of a renewal interval,
// so the pre-end query counted as sent long before the end, and the
// election dropped the leader at the end on answers older than its
// renewal: "no leader" until its next announcement (2.95 s in the fault
// harness, LAN timing, a 9 s freeze of a leader with a 10 s lease;
// TestFreezeOutlastingGossipKeepsTheTerm).
func (c *core) heardNearEnd(now time.Time) bool {
	w := &c.watch
	if !w.heard.After(w.sent) {
		return false
	}
	end := c.leaseEnd(now)
	return !end.IsZero() && end.Add(-c.preEndWait(now)).Before(w.next)
}

// noteAnnouncement records a COORDINATOR for the watched term (heard).
func (c *core) noteAnnouncement(now time.Time, m bully.Message) {
	if w := &c.watch; m.Type == bully.MsgCoordinator && w.term != 0 && m.From == w.leader && m.Term == w.term {
		w.heard = now
	}
}

// preEndWait is how long before the end the watch's last query goes out,
// so that its answers come before it: the peers' measured round trip, at
// least 10 ms and at most a quarter of a renewal interval (the queries'
// pace while a renewal is overdue).
func (c *core) preEndWait(now time.Time) time.Duration {
	return min(max(c.rtt.timeout(now), 10*time.Millisecond), c.cfg.Lease.RenewInterval()/4)
}

// noteSighting records a voter's answer for the watch, and plans the next
// query.
func (c *core) noteSighting(now time.Time, f floorReply) {
	w := &c.watch
	pv := f.Promise
	if w.term == 0 || pv == nil || !c.roster().Contains(toLeasing(f.From)) {
		return
	}
	s := sighting{at: now, free: now.Add(c.voterSpan(pv.FreeIn)), promised: w.seen[f.From.Name].promised}
	if pv.Holder == w.leader && pv.Term == w.term {
		s.renewed, s.promised = now.Add(-pv.Renewed), true
	}
	if pv.Released == w.leader && pv.ReleasedTerm >= w.term {
		w.released = true
	}
	w.seen[f.From.Name] = s
	c.tellEnd(now)
	ri := c.cfg.Lease.RenewInterval()
	var last time.Time
	for _, s := range w.seen {
		if s.renewed.After(last) {
			last = s.renewed
		}
	}
	// Just after the next renewal has reached the voters; when that is
	// overdue, every quarter of a renewal interval (the leader's own retry
	// pace) until the end, so the election acts on fresh answers only.
	w.next = last.Add(ri + c.cfg.Lease.AcquireBudget)
	if soonest := w.sent.Add(ri / 4); w.next.Before(soonest) {
		w.next = soonest
	}
}

// voterSpan is the longest a voter's duration d can last on this node's
// clock, the clocks' rates differing by up to the drift bound.
func (c *core) voterSpan(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(float64(d) / (1 - c.cfg.Lease.MaxDrift))
}

// tellEnd tells the election when a majority of the roster is free to
// grant (leaseEnd).
func (c *core) tellEnd(now time.Time) {
	w := &c.watch
	end := c.leaseEnd(now)
	if !end.IsZero() && end.Before(w.recheck) && now.Before(w.recheck) && c.answersPredate(now, w.heard) {
		// The leader announced its term after answers this end rests on,
		// and they are being asked again: no earlier than their answers
		// are due. Only later, so a node that forgot the leader still
		// holds its campaign until the end (LeaseEnds).
		end = w.recheck
	}
	if end.Equal(w.end) || (!end.After(now) && !w.end.IsZero() && !w.end.After(now)) {
		return // unchanged, or over both times
	}
	w.end = end
	if end.IsZero() {
		c.log.Debug("lease watch: not known when a majority of the voters may grant a new term (no fresh answers, or the term was released)",
			"leader", w.leader.Name, "term", w.term, "released", w.released)
	} else {
		c.log.Debug("lease watch: when a majority of the voters may grant a new term", "leader", w.leader.Name, "term", w.term,
			"in", end.Sub(now))
	}
	c.m.LeaseEnds(now, w.leader, w.term, end)
}

// leaseEnd is the earliest instant at which the voters free by then make a
// majority of the roster (of both sets of a joint one): this node's own
// voter, and the answers younger than a renewal interval and a query's
// budget. Older ones may predate a renewal they do not show: without a
// fresh query answered (the queries continue every quarter interval once
// a renewal is overdue) the end is unknown (zero), and the election does
// not act on it.
func (c *core) leaseEnd(now time.Time) time.Time {
	w := &c.watch
	if w.released {
		return time.Time{}
	}
	free := map[string]time.Time{}
	for name, s := range w.seen {
		if c.counts(now, s) {
			free[name] = s.free
		}
	}
	if w.selfPromised && !c.amnesia.active && c.roster().Contains(toLeasing(c.cfg.Self)) {
		free[c.cfg.Self.Name] = c.grants.Standing(now).Free
	}
	times := make([]time.Time, 0, len(free))
	for _, t := range free {
		times = append(times, t)
	}
	slices.SortFunc(times, time.Time.Compare)
	r := c.roster()
	for _, t := range times {
		if r.Satisfied(func(v leasing.Node) bool { f, ok := free[v.Name]; return ok && !f.After(t) }) {
			return t
		}
	}
	return time.Time{}
}

// counts reports whether a voter's answer counts towards the end: it saw
// the voter promise the term, and is younger than a renewal interval and
// a query's budget.
func (c *core) counts(now time.Time, s sighting) bool {
	return s.promised && now.Sub(s.at) <= c.cfg.Lease.RenewInterval()+c.cfg.Lease.AcquireBudget
}

// answersPredate reports whether an answer that counts towards the end
// came no later than t.
func (c *core) answersPredate(now, t time.Time) bool {
	for _, s := range c.watch.seen {
		if c.counts(now, s) && !s.at.After(t) {
			return true
		}
	}
	return false
}
