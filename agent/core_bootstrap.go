package agent

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/leasing"
)

// bootstrap is the first roster's creation with --expect N. Gossip views
// differ for a while after start, so two nodes may each see a different
// set of N fresh voters; each set must not become a roster, or (with N+1
// nodes) two overlapping clusters could each elect a leader. So a roster
// of set S is created only once every member of S has pledged S: a node
// pledges one set, ever (persisted before it answers), and only a set that
// is exactly what its own view shows. Two different sets of N among fewer
// than 2N fresh voters share a member, which pledged only one of them.
type bootstrap struct {
	roster leasing.Roster  // the pledged roster being collected; zero when none
	acks   map[string]bool // members that pledged it
	next   time.Time       // next round of pledge requests
	since  time.Time       // when collecting began
	warned string          // the conflict last reported, so it is said once
}

// pledgeReply answers a pledge request.
type pledgeReply struct {
	From bully.Node `msgpack:"from"`
	// Cluster is the cluster ID of the roster pledged for.
	Cluster string `msgpack:"cluster"`
	OK      bool   `msgpack:"ok"`
	// Reason says why it refused.
	Reason string `msgpack:"reason,omitempty"`
}

// freshView is the set of fresh voters advertising this node's --expect
// that gossip shows, this node included, sorted by name; ok is false once
// a member of an established cluster was seen (for good).
func (c *core) freshView() (fresh []leasing.Node, ok bool) {
	for _, mv := range c.live {
		if mv.Cluster != "" {
			c.seenCluster = true // an established cluster: learn its roster, never bootstrap
			return nil, false
		}
		if mv.Voter && mv.Expect == c.cfg.Expect {
			fresh = append(fresh, toLeasing(mv.Node))
		}
	}
	sort.Slice(fresh, func(i, j int) bool { return fresh[i].Name < fresh[j].Name })
	return fresh, !c.seenCluster
}

// bootstrapping reports whether this node still takes part in a bootstrap.
func (c *core) bootstrapping() bool {
	return c.quorumMode() && c.cfg.Expect > 0 && c.cfg.Voter && c.roster().IsZero() && !c.seenCluster
}

// maybeBootstrap pledges this node to the set of fresh voters it sees when
// that set has exactly --expect members, and starts collecting the others'
// pledges. A node already pledged to another set says so, loudly.
func (c *core) maybeBootstrap(now time.Time) {
	if !c.bootstrapping() {
		return
	}
	fresh, ok := c.freshView()
	if !ok {
		return
	}
	if len(fresh) > c.cfg.Expect {
		c.warnBootstrap(fmt.Sprintf("%d fresh voters advertise --expect %d (%v): refusing to bootstrap a roster of a subset; stop the extra nodes or give them --expect 0",
			len(fresh), c.cfg.Expect, names(fresh)))
	}
	if len(fresh) != c.cfg.Expect {
		return
	}
	want := leasing.Bootstrap(fresh)
	pledged := c.pledges.Roster()
	switch {
	case pledged.IsZero():
		if err := c.pledges.Save(want); err != nil {
			c.storageFailed(now, fmt.Errorf("pledge to bootstrap %s: %w", want, err))
			return
		}
		c.log.Info("pledged to bootstrap a roster", "roster", want.String())
	case pledged.ClusterID != want.ClusterID:
		c.warnBootstrap(fmt.Sprintf("this node pledged to bootstrap %s but now sees %v: waiting for the pledged set", pledged, names(fresh)))
		want = pledged
	}
	if c.boot.roster.ClusterID != want.ClusterID {
		c.boot = bootstrap{roster: want, acks: map[string]bool{c.cfg.Self.Name: true}, since: now, warned: c.boot.warned}
		c.completeBootstrap(now) // a set of one
	}
	c.askPledges(now)
}

// askPledges sends the pledge request to every member of the set that has
// not pledged yet, once per fetch interval.
func (c *core) askPledges(now time.Time) {
	b := &c.boot
	if b.roster.IsZero() || !c.roster().IsZero() || now.Before(b.next) {
		return
	}
	b.next = now.Add(rosterFetchInterval)
	r := b.roster
	var silent []string
	for _, v := range r.Voters {
		if !b.acks[v.Name] {
			silent = append(silent, v.Name)
			c.out = append(c.out, outMsg{to: toBully(v), env: envelope{Pledge: &r}})
		}
	}
	if now.Sub(b.since) >= pledgeSilence && len(silent) > 0 {
		c.warnBootstrap(fmt.Sprintf("no answer over the peer transport from %v to pledge %s: check that their peer ports (--peer-bind, advertised in gossip) are reachable from here",
			silent, r))
	}
}

// pledgeSilence is how long pledges may go unanswered before the bootstrap
// reports who is silent.
const pledgeSilence = 5 * rosterFetchInterval

// onPledge answers a pledge request for roster r: yes when this fresh
// voter is pledged to r, or pledges to it now because its own view shows
// exactly r's voters.
func (c *core) onPledge(now time.Time, r leasing.Roster) pledgeReply {
	rep := pledgeReply{From: c.cfg.Self, Cluster: r.ClusterID}
	mine, pledged := c.roster(), c.pledges.Roster()
	switch {
	case !mine.IsZero():
		rep.OK, rep.Reason = mine.ClusterID == r.ClusterID, "has a roster already: "+mine.String()
	case !pledged.IsZero():
		rep.OK, rep.Reason = pledged.ClusterID == r.ClusterID, "pledged to "+pledged.String()
	case !c.bootstrapping() || len(r.Voters) != c.cfg.Expect || !r.Contains(toLeasing(c.cfg.Self)):
		rep.Reason = "not bootstrapping with the same --expect"
	default:
		fresh, _ := c.freshView()
		if leasing.Bootstrap(fresh).ClusterID != r.ClusterID {
			rep.Reason = fmt.Sprintf("this node sees %v", names(fresh))
			break
		}
		if err := c.pledges.Save(r); err != nil {
			c.storageFailed(now, fmt.Errorf("pledge to bootstrap %s: %w", r, err))
			rep.Reason = "storage error"
			break
		}
		c.log.Info("pledged to bootstrap a roster", "roster", r.String())
		rep.OK = true
	}
	if rep.OK {
		rep.Reason = ""
	}
	return rep
}

// onPledgeReply counts a pledge, and creates the roster once every member
// of the set has pledged it. A refusal is an error only once pledges have
// been asked for pledgeSilence: while a fleet starts, the others often
// refuse because gossip has not shown them the whole set yet, and pledge
// a second later.
func (c *core) onPledgeReply(now time.Time, rep pledgeReply) {
	b := &c.boot
	if b.roster.IsZero() || rep.Cluster != b.roster.ClusterID || !c.roster().IsZero() {
		return
	}
	if !rep.OK {
		msg := fmt.Sprintf("%s will not bootstrap %s: %s", rep.From.Name, b.roster, rep.Reason)
		if now.Sub(b.since) < pledgeSilence {
			c.log.Debug("bootstrap: a pledge was refused; asking again", "reason", msg)
			return
		}
		c.warnBootstrap(msg)
		return
	}
	b.acks[rep.From.Name] = true
	c.completeBootstrap(now)
}

// completeBootstrap stores the pledged roster once every member pledged it.
func (c *core) completeBootstrap(now time.Time) {
	b := &c.boot
	for _, v := range b.roster.Voters {
		if !b.acks[v.Name] {
			return
		}
	}
	if err := c.rosters.Save(b.roster); err != nil {
		c.storageFailed(now, fmt.Errorf("store the bootstrapped roster: %w", err))
		return
	}
	c.log.Info("bootstrapped the voter roster: every member pledged it", "roster", b.roster.String())
}

// warnBootstrap reports a bootstrap that cannot go on, once per problem.
func (c *core) warnBootstrap(msg string) {
	if c.boot.warned == msg {
		return
	}
	c.boot.warned = msg
	c.log.Error("bootstrap stalled: " + msg)
}

// pledgedTo reports whether this node pledged to bootstrap exactly r: then
// a roster r learned from a peer is the one it helped create, not a sign
// of a lost disk.
func (c *core) pledgedTo(r leasing.Roster) bool {
	p := c.pledges.Roster()
	return !p.IsZero() && p.ClusterID == r.ClusterID && slices.Equal(p.Voters, r.Voters) && r.Version == 1
}

func names(ns []leasing.Node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Name
	}
	return out
}
