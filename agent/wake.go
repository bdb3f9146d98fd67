package agent

import (
	"time"

	"github.com/tenurehq/tenure/bully"
)

// idleTickFactor is how many ticks an idle driver sleeps between two
// looks at the core: 250 ms in the LAN profile, 100 ms in the local one.
const idleTickFactor = 5

// quiet reports whether nothing the core does by itself is due before
// now+d: it follows a leader, leads, or waits for a campaign of its own,
// with no election timer, lease round, probe, roster step, bootstrap or
// ended term pending within d. A quiet core is ticked every idleTickFactor
// ticks instead of every tick. A node waiting to campaign is quiet too:
// while a fleet starts every node but the highest waits seconds for its
// first campaign, and ticked every 50 ms, a hundred of them on one
// two-core host spent about a seventh of their CPU on those wake-ups.
// Peer messages and gossip events still reach it at once; what waits is
// only the work its timers start, and that only for timers not listed
// here (a leader's announcement, a follower forgetting a silent leader,
// the push of the roster to lagging members), by at most d. It errs
// towards false: any state not named here keeps the fast tick.
func (c *core) quiet(now time.Time, d time.Duration) bool {
	soon := func(t time.Time) bool { return !t.IsZero() && t.Before(now.Add(d)) }
	st := c.m.Status()
	switch {
	case c.rounds.current != nil, c.stopping != nil, c.steps.change != nil, c.amnesia.active:
		return false
	case c.disk.err != nil && soon(c.disk.retry):
		return false // a node whose disk is full may stay so for hours: only its retry needs the tick
	case soon(c.named.claims.Next()), c.named.table != nil && soon(c.named.table.Next()):
		return false
	case c.quorumMode() && c.roster().IsZero():
		return false // bootstrapping, or fetching the roster
	case !c.reach.sent.IsZero(), c.watch.term != 0 && soon(c.watch.next):
		return false
	case st.State == bully.StateLeader:
		return !soon(c.lease.renewAt) && !soon(c.lease.deadline) && !soon(c.steps.retry)
	case st.State != bully.StateFollower:
		return false
	case soon(c.m.Deadline()), c.wantsProbe(now) && !now.Add(d).Before(c.reach.next):
		return false
	}
	return true
}

// nextTick is how long the driver waits before it ticks the core again.
func (a *Agent) nextTick() time.Duration {
	now := a.cfg.Clock.Now()
	fast := a.cfg.TickInterval
	next := fast
	if slow := idleTickFactor * fast; a.stopping == nil && a.core.quiet(now, slow) {
		next = slow
	}
	if d, ok := a.memberSync.wait(now); ok {
		next = min(next, max(d, time.Millisecond))
	}
	return next
}
