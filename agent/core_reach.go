package agent

import (
	"strings"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/leasing"
)

// reach tracks whether this node can reach a majority of the roster's
// voters over the peer transport. Gossip may list a node alive that the
// peer transport cannot reach (memberlist's indirect probes get through
// where a direct connection does not); such a node must not hold the
// election up: a cut-off node neither campaigns nor answers ELECTIONs, and
// only a node with fresh proof of a majority claims leadership from a lower
// leader (bully.Machine.SetReach).
type reach struct {
	next time.Time // the next probe
	sent time.Time // the probe in flight went out at; zero when none
	// replied: voters that answered the last probe, in flight or not.
	// Answers that come after the probe's budget still count: on a loaded
	// host voters answer late, and a node that waited for its next probe
	// (an announce interval later) stayed cut off for that long.
	replied map[string]bool
	cutOff  bool      // the last probe reached too few voters, and no late answers made up for it
	proven  time.Time // when a probe last reached a majority
	// step is the roster step the proof is for, and the claims this node
	// heard as leader (noteRosterStep).
	step rosterStep
}

// rosterStep names one step of a roster.
type rosterStep struct {
	cluster        string
	version, epoch uint64
}

func stepOf(r leasing.Roster) rosterStep { return rosterStep{r.ClusterID, r.Version, r.Epoch} }

// noteRosterStep voids, when the roster changed, what was proven against
// the old one: this node's proof that it reaches a majority of the voters
// (it claims leadership from a lower leader only with fresh proof, and
// probes again), and, as leader, the claims of higher nodes it heard
// (bully.Machine.ForgetClaims). A node that reached a majority of one
// voter set may not reach one of the next: in core schedule 272,725 a
// node cut off from all but the leader reached a majority of [leader,
// itself, one more]; the leader changed the voters to four, yielded to it
// on the claims it had made before, and it could not take the term,
// which went back to the node that had resigned it moments before.
func (c *core) noteRosterStep(now time.Time) {
	st := stepOf(c.roster())
	if st == c.reach.step {
		return
	}
	c.reach.step, c.reach.proven = st, time.Time{}
	c.m.ForgetClaims()
	c.tellReach(now)
}

// tellReach tells the election what this node knows of its reach of the
// voters.
func (c *core) tellReach(now time.Time) {
	if c.quorumMode() && c.roster().IsZero() {
		c.m.SetReach(true, false) // no roster: it cannot lead, so it holds nobody up
		return
	}
	c.m.SetReach(c.reach.cutOff, c.mayClaim(now))
}

// probeReach starts a probe when one is due and concludes the one in
// flight once its budget (peerWait) is over, then tells the election what
// it found. A probe is a FloorQuery to every other voter; any answer counts.
func (c *core) probeReach(now time.Time) {
	rc := &c.reach
	switch {
	case !rc.sent.IsZero() && (!now.Before(rc.sent.Add(c.peerWait(now))) || c.probeReached()):
		c.concludeProbe(now)
	case rc.sent.IsZero() && rc.cutOff && c.probeReached():
		c.concludeProbe(now) // late answers made a majority
	}
	if rc.sent.IsZero() && !now.Before(rc.next) && c.wantsProbe(now) {
		c.startProbe(now)
	}
	c.tellReach(now)
}

// wantsProbe: an eligible follower probes when the answer matters to the
// election: it outranks the leader and would claim leadership from it, or
// no leader is known and it is about to campaign (a cut-off node, too,
// notices the repair before its next turn: the election puts its campaign
// off by its rank delay each time it finds it cut off, and it probes as
// that turn comes). A follower whose campaign is further off does not
// probe: the
// nodes below the top wait one rank delay per node above them, so only the
// few nearest the top probe, and a voter's probe load does not grow with
// the fleet (every eligible node probing every voter each interval made
// each voter of a 100-node fleet answer about 30 probes a second).
func (c *core) wantsProbe(now time.Time) bool {
	if !c.quorumMode() || !c.cfg.Eligible || c.roster().IsZero() || c.leading() {
		return false
	}
	st := c.m.Status()
	if !st.Leader.IsZero() {
		return c.cfg.Election.Preempt && st.Leader.Less(c.cfg.Self)
	}
	return c.campaignNear(now, st)
}

// campaignNear: the election machine campaigns (other than waiting for the
// COORDINATOR of a higher node that answered it), or its campaign timer
// ends within an acquire budget and a rank delay, so a probe started now
// most often concludes before it. The window does not widen with the peer
// wait (peerWait): while a fleet starts that wait is longest, and a wider
// window has more of the fleet probe the voters at once. It once was a
// whole probe interval wider, so that the periodic probe surely fell in it;
// but in a fleet that starts in name order each new node is, for its first
// seconds, the highest it knows, and nearly every node probed every voter
// once while it started: each of five voters answered about 110 probes,
// most on new TLS connections, while 100 agents started. A node's first
// probe is due when its window opens (reach.next is zero), and by then the
// nodes that started after it are most often listed and have put its
// campaign off.
func (c *core) campaignNear(now time.Time, st bully.Status) bool {
	if st.State != bully.StateFollower && st.State != bully.StateWaiting {
		return true
	}
	d := c.m.Deadline()
	return d.IsZero() || !d.After(now.Add(c.cfg.Lease.AcquireBudget+c.cfg.Election.RankDelay))
}

func (c *core) startProbe(now time.Time) {
	c.reach.sent, c.reach.replied = now, map[string]bool{}
	c.reach.next = now.Add(c.cfg.Election.AnnounceInterval)
	c.askFloors()
}

// probeReached reports whether the voters that answered the probe in
// flight make a majority of the roster. This node counts for itself unless
// it is an amnesiac voter, which cannot grant itself a lease until it has
// learned its floor. A probe that reached a majority concludes at once
// rather than at the end of its budget: more answers cannot change it.
func (c *core) probeReached() bool { return c.reachCheck().reached(c.reach.replied) }

// reachCheck is a check of whether this node reaches a majority of the
// voters of roster: which voters answered is set apart, so that the agent
// can run one off the driver (Agent.checkReach).
type reachCheck struct {
	roster     leasing.Roster
	self       leasing.Node
	selfCounts bool // this node's own vote counts (it is not amnesiac)
}

// reachCheck is a check against this node's roster.
func (c *core) reachCheck() reachCheck {
	return reachCheck{roster: c.roster(), self: toLeasing(c.cfg.Self), selfCounts: !c.amnesia.active}
}

// reached reports whether the voters in answered, with this node where it
// is a voter whose vote counts, make a majority of the roster (of both
// sets of a joint one).
func (rc reachCheck) reached(answered map[string]bool) bool {
	return rc.roster.Satisfied(func(v leasing.Node) bool {
		return (v == rc.self && rc.selfCounts) || answered[v.Name]
	})
}

// others are the roster's voters other than this node.
func (rc reachCheck) others() []leasing.Node {
	var out []leasing.Node
	for _, v := range rc.roster.Members() {
		if v != rc.self {
			out = append(out, v)
		}
	}
	return out
}

// concludeProbe counts the voters that answered against the roster's
// majority.
func (c *core) concludeProbe(now time.Time) {
	rc := &c.reach
	ok := c.probeReached()
	switch {
	case ok:
		rc.proven = now
		if strings.HasPrefix(c.rounds.noQuorum, unreachablePrefix) {
			c.rounds.noQuorum = ""
		}
	case c.m.Status().Leader.IsZero():
		c.rounds.noQuorum = unreachablePrefix + ": " + c.describeSilent(now, c.probeSilent(), len(c.roster().Members()))
	}
	if ok == rc.cutOff {
		c.log.Info("reachability of the voters changed", "reaches_majority", ok, "answered", len(rc.replied),
			"no_reply", c.listSilent(now, c.probeSilent()))
	}
	rc.cutOff, rc.sent = !ok, time.Time{}
}

// unreachablePrefix starts the status reason of a node cut off from the
// voters.
const unreachablePrefix = "no quorum: cannot reach a majority of the voters"

// noteReply records a probe answer from n, also one that comes after the
// probe concluded.
func (c *core) noteReply(n bully.Node) {
	if c.reach.replied != nil {
		c.reach.replied[n.Name] = true
	}
}

// mayClaim: a probe reached a majority recently enough (within two probe
// intervals and a budget) and none failed since.
func (c *core) mayClaim(now time.Time) bool {
	fresh := 2*c.cfg.Election.AnnounceInterval + c.cfg.Lease.AcquireBudget
	return !c.reach.cutOff && !c.reach.proven.IsZero() && now.Sub(c.reach.proven) <= fresh
}
