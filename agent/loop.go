package agent

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/gossip"
	"github.com/tenurehq/tenure/leasing"
)

// The gossip tags that advertise a node's roster: its cluster ID, version,
// and the term that proposed that step.
const (
	clusterTag       = "c"
	rosterVersionTag = "rv"
	rosterEpochTag   = "re"
	// seatTag marks a node that holds a seat in the roster it advertises
	// (a voter of it), so that nodes fetching the roster can spare the
	// voters. It changes only with the roster, so it costs no gossip
	// update of its own.
	seatTag = "s"
	// expectTag advertises --expect, so only nodes bootstrapping together
	// count each other.
	expectTag = "x"
	// zoneTag advertises --zone, over which the leader spreads the voters.
	zoneTag = "z"
)

// loop is the driver goroutine: it alone touches a.core.
func (a *Agent) loop() {
	defer close(a.loopDone)
	defer a.endAllSessions()
	ticker := newTicker(a.cfg.TickInterval)
	defer ticker.stop()
	a.syncMembers()
	events := a.members.Events()
	for {
		ticker.within(a.nextTick())
		select {
		case <-a.ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				// Serf shut itself down (for example after losing a name
				// conflict): without membership the agent cannot take part.
				a.abort(errors.New("agent: gossip membership ended (was this node's name taken by another node?)"))
				return
			}
			a.counts.add("gossip." + ev.Type.String())
			a.publishMember(ev)
			a.memberSync.changed(a.cfg.Clock.Now(), a.syncMembers)
		case f := <-a.inbox:
			f()
		case <-ticker.c():
			ticker.fired()
			now := a.cfg.Clock.Now()
			a.memberSync.due(now, a.core.electionDue(now), a.syncMembers)
			a.core.tick(a.cfg.Clock.Now())
			a.flush()
		}
	}
}

// ticker wakes the driver to tick the core: every tick while the core has
// timers running, less often while it is quiet (core.quiet). An idle
// agent's cost is mostly these wake-ups (each a few context switches of
// the Go runtime): at one every 50 ms, about 240 context switches and 0.7%
// of a core per second, which a fleet of a hundred agents on one host
// could not afford. Used by the driver goroutine only.
type ticker struct {
	t   *time.Timer
	due time.Time // when t fires
}

func newTicker(d time.Duration) *ticker {
	return &ticker{t: time.NewTimer(d), due: time.Now().Add(d)}
}

func (t *ticker) c() <-chan time.Time { return t.t.C }

// within makes the next tick come no later than d from now.
func (t *ticker) within(d time.Duration) {
	if at := time.Now().Add(d); at.Before(t.due) {
		t.t.Reset(d)
		t.due = at
	}
}

// fired records that the timer fired: the next within sets it again.
func (t *ticker) fired() { t.due = time.Now().Add(time.Hour) }

func (t *ticker) stop() { t.t.Stop() }

// memberSync limits how often gossip events rebuild the core's membership.
// Serf reports a join wave, or a wave of tag updates, as one event per
// member, and a rebuild costs O(n): rebuilding after every event made each
// agent of a fleet of n do O(n²) work whenever the fleet started or learned
// a roster (about 270 rebuilds of 100 members per agent while 100 agents
// started; one per 50 ms tick still made about 50). The first event after
// a quiet interval is synced at once; later ones wait until an interval
// has passed since the last rebuild, so a wave costs one rebuild per
// interval and no event waits longer than one. Used by the driver
// goroutine only.
type memberSync struct {
	interval time.Duration
	last     time.Time // the last rebuild
	pending  bool      // an event came since
}

// memberSyncInterval is the least time between two rebuilds of the
// membership (memberSync): a quarter of a second, or the tick if longer.
func memberSyncInterval(tick time.Duration) time.Duration {
	return max(tick, 250*time.Millisecond)
}

// changed reports a gossip event at now: sync runs at once unless a
// rebuild happened within the last interval.
func (s *memberSync) changed(now time.Time, sync func()) {
	if !s.last.IsZero() && now.Sub(s.last) < s.interval {
		s.pending = true
		return
	}
	s.last, s.pending = now, false
	sync()
}

// due runs sync, at a tick at now, if an event is waiting for it and an
// interval has passed since the last rebuild, or at once if urgent: the
// election's timer is due, and what it does then (campaign, or give up on
// the nodes it asked) depends on which higher nodes it knows. A node
// whose campaign timer ended 23 ms after gossip reported the three nodes
// above it campaigned without them, the events still waiting out the
// interval, and won the fleet's first term, to be preempted by the
// highest seconds later. When urgent it rebuilds even with no event read
// since the last rebuild (unless that was within urgentRefresh): a rebuild
// reads serf's member list, which is current, while its events may still
// wait unread in the channel. An agent starved of CPU while 100 agents
// started read the joins of the 27 nodes above it 3.5 s after the fact,
// all at once, and had won the first term in between.
func (s *memberSync) due(now time.Time, urgent bool, sync func()) {
	stale := s.pending || now.Sub(s.last) >= urgentRefresh
	if (urgent && stale) || (s.pending && now.Sub(s.last) >= s.interval) {
		s.last, s.pending = now, false
		sync()
	}
}

// urgentRefresh is how old a rebuild may be for the election to act on it
// with no event read since (memberSync.due).
const urgentRefresh = 50 * time.Millisecond

// wait is how long until a waiting event is due, and whether one waits.
func (s *memberSync) wait(now time.Time) (time.Duration, bool) {
	if !s.pending {
		return 0, false
	}
	return max(0, s.last.Add(s.interval).Sub(now)), true
}

// do runs f on the driver goroutine and waits for it, or for ctx or the
// agent to end.
func (a *Agent) do(ctx context.Context, f func()) error {
	done := make(chan struct{})
	select {
	case a.inbox <- func() { f(); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-a.ctx.Done():
		return errStopped
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-a.loopDone:
		return errStopped
	}
}

// syncMembers gives the core the live members gossip knows.
func (a *Agent) syncMembers() {
	a.counts.add("sync_members")
	var views []memberView
	alive := 0
	members := a.members.Members()
	a.book.set(members)
	for _, m := range members {
		if m.Status != gossip.StatusAlive && m.Status != gossip.StatusLeft {
			continue
		}
		rv, _ := strconv.ParseUint(m.Tags[rosterVersionTag], 10, 64)
		re, reErr := strconv.ParseUint(m.Tags[rosterEpochTag], 10, 64)
		expect, _ := strconv.Atoi(m.Tags[expectTag])
		views = append(views, memberView{
			Member:        bully.Member{Node: bully.Node{ID: m.ID, Name: m.Name}, Eligible: m.Eligible},
			Voter:         m.Voter,
			Cluster:       m.Tags[clusterTag],
			RosterVersion: rv,
			// Agents before the tag advertise no term: compare versions.
			RosterEpoch:      re,
			RosterEpochKnown: reErr == nil,
			Seated:           m.Tags[seatTag] == "1",
			Expect:           expect,
			Zone:             m.Tags[zoneTag],
			Left:             m.Status == gossip.StatusLeft,
			PeerAddr:         m.PeerAddr,
		})
		if m.Status == gossip.StatusAlive {
			alive++
		}
	}
	a.core.setMembers(a.cfg.Clock.Now(), views)
	a.publishMembers(alive)
	a.flush()
}

// flush publishes the core's status, lets the release of an ended term go
// once its local work has stopped (stopwait.go), sends what the core
// queued, and advertises a new cluster ID. The returned group is done when
// the messages it sent are delivered or failed.
func (a *Agent) flush() *sync.WaitGroup {
	var sent sync.WaitGroup
	a.counts.add("flush")
	a.noteStorage()
	now := a.cfg.Clock.Now()
	deadline := a.publishedDeadline()
	a.publishStatus(now)
	a.settleStop(now, deadline)
	a.dispatchNamed(now)
	for _, msg := range a.core.ready() {
		a.send(msg, &sent)
	}
	a.core.dispatched(a.cfg.Clock.Now())
	if n, ok := a.core.takePreemptAsk(); ok {
		a.askPreempt(n, a.core.peerWait(now))
	}
	if a.core.takeDiskStepDown() {
		a.stepDownForDisk()
	}
	a.advertiseCluster()
	return &sent
}

// publishedDeadline is the lease deadline of the status last published:
// when a term ends, the deadline it had.
func (a *Agent) publishedDeadline() time.Time { return a.snap.Load().deadline }

// advertiseCluster puts the roster's cluster ID and version into this
// node's gossip tags when they change.
func (a *Agent) advertiseCluster() {
	r := a.core.roster()
	if r.IsZero() || (r.ClusterID == a.advertised.ClusterID && r.Version == a.advertised.Version && r.Epoch == a.advertised.Epoch) {
		return
	}
	a.counts.add("set_tags")
	a.advertised = r
	a.publishTags()
}

// publishTags advertises this node's eligibility and extra tags as they
// are now (gossipTags of the roster it advertises). It runs on the driver.
func (a *Agent) publishTags() {
	a.tags.publish(tagSet{eligible: a.eligible(), extra: a.gossipTags(a.advertised)})
}

// gossipTags are this node's extra gossip tags: its --expect and --zone,
// and its roster's cluster ID, version and term once it has one, with whether
// it holds a seat in it.
func (a *Agent) gossipTags(r leasing.Roster) map[string]string {
	tags := map[string]string{}
	if a.cfg.Expect > 0 {
		tags[expectTag] = strconv.Itoa(a.cfg.Expect)
	}
	if a.cfg.Zone != "" {
		tags[zoneTag] = a.cfg.Zone
	}
	if !r.IsZero() {
		tags[clusterTag], tags[rosterVersionTag] = r.ClusterID, strconv.FormatUint(r.Version, 10)
		tags[rosterEpochTag] = strconv.FormatUint(r.Epoch, 10)
		if r.Contains(toLeasing(a.self())) {
			tags[seatTag] = "1"
		}
	}
	a.drainTags(tags)
	if a.storageDown.Load() {
		tags[storageTag] = "1"
	}
	return tags
}

// noteStorage advertises, when it changes, whether this node's writes to
// its data dir fail (core_storage.go): gossip then lists it as not
// eligible, and why. It runs on the driver.
func (a *Agent) noteStorage() {
	down := a.core.storageFailure() != nil
	if a.storageDown.Swap(down) == down {
		return
	}
	a.counts.add("set_tags")
	a.publishTags()
}

// RefusedPeers counts the peer connections refused since start because
// their handshake did not prove the cluster key: another key, no key, or
// no TLS at all.
func (a *Agent) RefusedPeers() uint64 {
	if a.peerTLS == nil {
		return 0
	}
	return a.peerTLS.Failed()
}
