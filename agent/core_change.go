package agent

import (
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/leasing"
)

// rosterSteps are a leader's changes to the roster.
type rosterSteps struct {
	change *rosterChange // the step in flight
	// committedJoint is the joint roster this leader saw stored on a
	// majority of both its sets: only then may it propose the final one.
	committedJoint leasing.Roster
	retry          time.Time // no new step before
	pushAt         time.Time // next push of the roster to lagging members
}

// rosterChange is a roster step the leader is committing.
type rosterChange struct {
	target leasing.Roster
	acks   map[string]bool
	budget time.Time
}

// Errors of force-leave.
var (
	errForceLeaveSelf    = errors.New("agent: force-leave: the leader cannot remove itself; stop it, or run force-leave on another node")
	errForceLeaveUnknown = errors.New("agent: force-leave: no such voter in the roster")
)

// driveRoster makes a leader with a valid lease take the next roster step:
// finish a joint roster, or move towards the voter set the rules of
// core_voters.go want. One step at a time.
func (c *core) driveRoster(now time.Time) {
	if !c.quorumMode() || !c.leaseValid(now) {
		c.steps.change = nil
		return
	}
	if c.steps.change != nil {
		if !now.Before(c.steps.change.budget) {
			c.log.Warn("roster change not acknowledged in time; will retry", "roster", c.steps.change.target.String())
			c.steps.change, c.steps.retry = nil, now.Add(c.cfg.Lease.RenewInterval())
		}
		return
	}
	if now.Before(c.steps.retry) {
		return
	}
	if next, ok := c.nextRoster(now); ok {
		c.propose(now, next)
		return
	}
	if !now.Before(c.steps.pushAt) {
		c.steps.pushAt = now.Add(rosterFetchInterval)
		c.pushRoster()
	}
}

// nextRoster is the next step from the current roster, if any. A joint
// roster moves to its final roster only once this leader saw the joint one
// stored on a majority of both sets (until then the joint step itself is
// proposed again, after a timeout, or when this leader inherited it), and
// once this leader's lease was renewed under the joint roster. The lease
// rule matters when a step changes more than one voter: a lease granted
// under the old set is backed by a majority of the old set only, which a
// majority of the new set may miss entirely (from [a] to [a b c], {b, c});
// renewed under the joint roster, it is backed by a majority of both, so a
// candidate under the final roster meets a voter that promised this leader.
// Otherwise the voter-set rules (core_voters.go) pick the next set.
func (c *core) nextRoster(now time.Time) (leasing.Roster, bool) {
	r, term := c.roster(), c.lease.epoch
	if r.Joint() {
		switch {
		case !sameRoster(c.steps.committedJoint, r):
			return r, true
		case !sameRoster(c.lease.roster, r):
			return leasing.Roster{}, false // the next renewal runs under the joint roster
		}
		return r.Final(term), true
	}
	return c.seatsChange(now, r)
}

// propose stores a step locally, then sends it to every voter of both sets.
func (c *core) propose(now time.Time, next leasing.Roster) {
	if err := c.rosters.Save(next); err != nil {
		c.storageFailed(now, fmt.Errorf("store the roster step proposed: %w", err))
		return
	}
	c.log.Info("roster change proposed", "roster", next.String())
	c.steps.change = &rosterChange{target: next, acks: map[string]bool{}, budget: now.Add(2 * c.cfg.Lease.AcquireBudget)}
	u := rosterUpdate{From: c.cfg.Self, Term: c.lease.epoch, Roster: next}
	for _, v := range next.Members() {
		if toBully(v) == c.cfg.Self {
			c.steps.change.acks[v.Name] = true
			continue
		}
		c.out = append(c.out, outMsg{to: toBully(v), env: envelope{RosterUpdate: &u}})
	}
	c.checkCommitted(now)
}

// onRosterAck counts an acknowledgement of the step in flight.
func (c *core) onRosterAck(now time.Time, a rosterAck) {
	ch := c.steps.change
	if ch == nil || a.Version != ch.target.Version || a.Epoch != ch.target.Epoch {
		return
	}
	if !a.OK {
		c.log.Debug("roster change refused", "by", a.From.Name, "reason", a.Reason)
		return
	}
	ch.acks[a.From.Name] = true
	c.checkCommitted(now)
}

// checkCommitted ends the step once a majority of both sets stored it, and
// tells every live member of the final roster.
func (c *core) checkCommitted(now time.Time) {
	ch := c.steps.change
	if ch == nil || !ch.target.Satisfied(func(n leasing.Node) bool { return ch.acks[n.Name] }) {
		return
	}
	c.steps.change = nil
	c.log.Info("roster change committed", "roster", ch.target.String())
	if ch.target.Joint() {
		c.steps.committedJoint = ch.target
		c.lease.renewAt = now // renew under the joint roster now (see nextRoster)
		return
	}
	c.pushRoster()
}

// sameRoster reports whether a and b are the same roster step.
func sameRoster(a, b leasing.Roster) bool {
	return !a.IsZero() && a.ClusterID == b.ClusterID && a.Version == b.Version && a.Epoch == b.Epoch
}

// pushRoster sends the roster to live members that advertise an older one
// (an earlier version, or an earlier term's step of its version), so
// observers and lagging nodes learn it.
func (c *core) pushRoster() {
	r := c.roster()
	u := rosterUpdate{From: c.cfg.Self, Term: c.lease.epoch, Roster: r}
	for _, name := range sortedNames(c.live) {
		mv := c.live[name]
		if mv.Node != c.cfg.Self && mv.olderRoster(r) {
			c.out = append(c.out, outMsg{to: mv.Node, env: envelope{RosterUpdate: &u}})
		}
	}
}

// onRosterUpdate stores a roster step from a leader. A voter of the current
// roster accepts steps only from the node it has promised its lease to, so a
// deposed leader cannot change the roster; a node outside the roster (an
// observer, or a voter being admitted) accepts any newer step of its cluster.
// A node with no roster that finds itself named holds its vote, as when it
// fetches one (mayHaveGranted).
func (c *core) onRosterUpdate(now time.Time, u rosterUpdate) rosterAck {
	ack := rosterAck{From: c.cfg.Self, Version: u.Roster.Version, Epoch: u.Roster.Epoch}
	cur := c.roster()
	c.checkDiverged(u.Roster)
	switch {
	case cur.ClusterID != "" && u.Roster.ClusterID != cur.ClusterID:
		ack.Reason = "other cluster"
	case !u.Roster.Newer(cur) && (u.Roster.Version != cur.Version || u.Roster.Epoch != cur.Epoch):
		ack.Reason = "stale roster"
	case !u.Roster.Newer(cur):
		ack.OK = true // already stored
	case cur.Contains(toLeasing(c.cfg.Self)) && c.grants != nil && !c.grants.HoldsPromiseFor(now, toLeasing(u.From)):
		ack.Reason = "not from the lease holder"
	default:
		if err := c.rosters.Save(u.Roster); err != nil {
			c.storageFailed(now, fmt.Errorf("store the roster step from %s: %w", u.From.Name, err))
			ack.Reason = "storage error"
			return ack
		}
		c.log.Info("stored roster", "roster", u.Roster.String(), "from", u.From.Name)
		ack.OK = true
		if cur.IsZero() && c.mayHaveGranted(u.Roster) {
			// As for a fetched roster (adoptRoster): before, a voter that
			// lost its data dir and learned the roster from a leader's push
			// voted at once, forgetting promises it had given.
			c.becomeAmnesiac(now, "the leader "+u.From.Name+" pushed a roster naming this node: "+u.Roster.String())
		}
	}
	return ack
}

// adoptNewer stores a newer roster of this cluster reported by a voter's
// refusal, so this node campaigns under it next time.
func (c *core) adoptNewer(now time.Time, r leasing.Roster) {
	cur := c.roster()
	c.checkDiverged(r)
	if r.ClusterID != cur.ClusterID || !r.Newer(cur) {
		return
	}
	if err := c.rosters.Save(r); err != nil {
		c.storageFailed(now, fmt.Errorf("store a newer roster: %w", err))
		return
	}
	c.log.Info("learned a newer roster", "roster", r.String())
}

// checkDiverged reports, loudly and once per roster, a roster of this
// node's cluster that has the same version and term as its own but other
// voters: two rosters that should be one. It means the cluster's rosters
// were created or changed outside the rules (for example a data dir copied
// between hosts), and leases may not be exclusive.
func (c *core) checkDiverged(r leasing.Roster) {
	cur := c.roster()
	if r.ClusterID != cur.ClusterID || r.Version != cur.Version || r.Epoch != cur.Epoch || r.String() == cur.String() {
		return
	}
	if key := "diverged " + r.String(); !c.warned[key] {
		c.warned[key] = true
		c.log.Error("a member holds a different roster of this cluster at the same version: two rosters that should be one; check for copied data dirs",
			"this_roster", cur.String(), "other_roster", r.String())
	}
}

// forceLeave asks this node, as leader, to remove a voter that will not
// come back. It returns the leader to ask instead when this node does not
// lead (zero when none is known).
func (c *core) forceLeave(now time.Time, name string) (bully.Node, error) {
	if !c.leaseValid(now) {
		return c.m.Status().Leader, fmt.Errorf("agent: force-leave: %w", errNotLeaderHere)
	}
	if name == c.cfg.Self.Name {
		return bully.Node{}, errForceLeaveSelf
	}
	if !rosterHas(c.roster(), name) {
		return bully.Node{}, fmt.Errorf("%w: %q", errForceLeaveUnknown, name)
	}
	if _, ok := c.forced[name]; !ok {
		c.forced[name] = now
		c.log.Info("force-leave requested", "voter", name)
	}
	return bully.Node{}, nil
}

var errNotLeaderHere = errors.New("this node does not lead")

func rosterHas(r leasing.Roster, name string) bool {
	for _, v := range r.Members() {
		if v.Name == name {
			return true
		}
	}
	return false
}

// forceLeaveReply answers a force-leave forwarded by another node.
func (c *core) forceLeaveReply(now time.Time, name string) *forceLeaveReply {
	_, err := c.forceLeave(now, name)
	switch {
	case err == nil:
		return &forceLeaveReply{}
	case errors.Is(err, errNotLeaderHere):
		return &forceLeaveReply{Code: "not_leader", Error: err.Error()}
	case errors.Is(err, errForceLeaveUnknown):
		return &forceLeaveReply{Code: "not_found", Error: err.Error()}
	default:
		return &forceLeaveReply{Code: "self", Error: err.Error()}
	}
}
