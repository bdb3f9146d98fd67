package agent

import (
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/leasing"
	"github.com/tenurehq/tenure/leasing/named"
)

// Named leases (package named; docs/DESIGN.md §9). The leader keeps the
// table of its term (c.named.table); every node keeps the claims of its local
// sessions (c.named.claims) and sends their requests to the leader it follows,
// addressed to that leader's term. A leader's own sessions are served
// without the network.

// namedLeases is a core's part in named leases: the table it serves while
// it leads, the claims of its local sessions, and what happened to them
// since the driver last asked.
type namedLeases struct {
	table  *named.Table // nil unless this node leads (namedTable)
	claims *named.Claims
	events []named.Event
}

// MinNamedTTL is the shortest TTL of a named lease.
const MinNamedTTL = time.Second

// namedTTLFactor bounds a named lease's TTL: at most this many times the
// granting leader's lease TTL, so a holder can keep its lease across a
// crash of the leader (the failover takes about one lease TTL) by
// re-claiming it from the next leader. DefaultNamedTTL is twice the lease
// TTL.
const namedTTLFactor = maxTTLFactor

// DefaultNamedTTL returns the TTL of a named lease when the client names
// none: twice the lease TTL.
func DefaultNamedTTL(leaseTTL time.Duration) time.Duration { return 2 * leaseTTL }

// maxNamedTTL is the longest named lease this node grants or asks for.
func (c *core) maxNamedTTL() time.Duration { return namedTTLFactor * c.cfg.Lease.TTL }

// Errors of named leases.
var (
	errNamedAvailable = errors.New("named leases need --consistency quorum: without a quorum no lease is safe")
	errNamedTTL       = errors.New("bad ttl")
)

// startTable opens the named-lease table of the term rd won at now. It
// grants names nobody re-claims only after namedTTLFactor times the
// longest lease TTL the granting voters ever promised: every earlier
// leader's lease TTL is among those, and its named grants were at most
// namedTTLFactor times it, so they have all run out by then. Without that
// record (a voter lost its disk), after namedTTLFactor times the longest
// lease TTL this node's voter accepts. In the cluster's first term
// (Round.First) there is nothing to wait for.
func (c *core) startTable(now time.Time, rd *leasing.Round) {
	longest, ok := rd.LongestTTL()
	if !ok {
		longest = c.maxTTL()
	}
	grace := namedTTLFactor * longest
	if rd.First() {
		grace = 0 // the cluster's first term: nobody granted anything before
	}
	c.named.table = named.NewTable(named.Config{MinTTL: MinNamedTTL, MaxTTL: c.maxNamedTTL()}, rd.Epoch, now, grace)
}

// namedTable returns the table while this node leads its term with a
// valid lease, and drops it once the term is over. A lapse of the lease
// within the term only suspends it: a late renewal (addLateRenewal) may
// extend the same term's lease, and the table then goes on, knowing every
// name it granted. It dropped itself at the lapse, and the leader then led
// on with no table, which only a new term makes: no named request was
// served again (random schedule 614,156: a leader resumed from a pause 7
// ms past its deadline, its late renewal answers then came). The revived
// lease is backed by a majority of the voters' promises to this term
// (I3), so no other term can have begun in the gap.
func (c *core) namedTable(now time.Time) *named.Table {
	if c.named.table == nil {
		return nil
	}
	if !c.lease.acting || c.named.table.Term() != c.lease.epoch {
		c.named.table = nil
		return nil
	}
	if !c.leaseValid(now) {
		return nil
	}
	return c.named.table
}

// onNamed answers a named-lease request as the leader of its term.
func (c *core) onNamed(now time.Time, req named.Request) named.Reply {
	t := c.namedTable(now)
	if t == nil {
		return named.Reply{Seq: req.Seq, Term: req.Term, Name: req.Name, Holder: req.Holder, Code: named.CodeNotLeader,
			Message: fmt.Sprintf("%s does not lead term %d", c.cfg.Self.Name, req.Term)}
	}
	rep, pushes := t.Handle(now, req)
	c.pushGrants(now, pushes)
	return rep
}

// pushGrants sends grants made to waiters to their agents.
func (c *core) pushGrants(now time.Time, grants []named.Reply) {
	for _, g := range grants {
		if toBully(g.Holder.Node) == c.cfg.Self {
			c.onNamedReply(now, g)
			continue
		}
		c.out = append(c.out, outMsg{to: toBully(g.Holder.Node), env: envelope{NamedReply: &g}})
	}
}

// onNamedReply takes the leader's answer (or pushed grant) for a local
// session.
func (c *core) onNamedReply(now time.Time, rep named.Reply) {
	events, releases := c.named.claims.Handle(now, rep)
	c.named.events = append(c.named.events, events...)
	for _, r := range releases {
		c.sendNamed(now, r)
	}
}

// sendNamed sends a request of a local session to the leader.
func (c *core) sendNamed(now time.Time, req named.Request) {
	leader, _ := c.named.claims.Leader()
	if toBully(leader) == c.cfg.Self {
		c.onNamedReply(now, c.onNamed(now, req))
		return
	}
	c.out = append(c.out, outMsg{to: toBully(leader), env: envelope{Named: &req}})
}

// driveNamed runs the named leases' timers: the claims follow the leader
// and term this node knows, send what is due and lose what ran out; the
// leader's table ends leases and waits and grants freed names.
func (c *core) driveNamed(now time.Time) {
	if !c.quorumMode() {
		return
	}
	st := c.m.Status()
	leader, term := toLeasing(st.Leader), st.Term
	if st.Leader == c.cfg.Self && !c.leaseValid(now) {
		leader, term = leasing.Node{}, 0
	}
	c.named.claims.SetLeader(now, leader, term)
	if t := c.namedTable(now); t != nil {
		c.pushGrants(now, t.Tick(now))
	}
	c.named.events = append(c.named.events, c.named.claims.Expire(now)...)
	for _, req := range c.named.claims.Due(now) {
		c.sendNamed(now, req)
	}
}

// dropGoneWaiters removes from the leader's queues the waiters of nodes
// gossip no longer lists alive.
func (c *core) dropGoneWaiters(now time.Time) {
	t := c.namedTable(now)
	if t == nil {
		return
	}
	gone := map[string]bool{}
	for _, in := range t.List(now) {
		for _, w := range in.Waiters {
			if _, ok := c.live[w.Node.Name]; !ok {
				gone[w.Node.Name] = true
			}
		}
	}
	for n := range gone {
		c.pushGrants(now, t.DropNode(now, n))
	}
}

// namedWant starts a local session's claim on name (of group, for a
// partition).
func (c *core) namedWant(now time.Time, name string, session uint64, ttl time.Duration, wait bool, p named.Policy, group string) error {
	if !c.quorumMode() {
		return errNamedAvailable
	}
	if err := named.CheckName(name); err != nil {
		return err
	}
	if ttl < MinNamedTTL || ttl > c.maxNamedTTL() {
		return fmt.Errorf("%w: %v is not between %v and %v (%d times --lease-ttl)", errNamedTTL, ttl, MinNamedTTL, c.maxNamedTTL(), namedTTLFactor)
	}
	c.named.claims.Want(now, name, session, ttl, wait, p, group)
	c.driveNamed(now)
	return nil
}

// namedDrop ends a local session's claim on name, releasing it.
func (c *core) namedDrop(now time.Time, name string, session uint64) {
	if r, ok := c.named.claims.Drop(now, name, session); ok {
		c.sendNamed(now, r)
	}
}

// namedAbandon ends a local session's claim on name; a held lease is not
// released but left to run out at the leader (Claims.Abandon).
func (c *core) namedAbandon(now time.Time, name string, session uint64) {
	if r, ok := c.named.claims.Abandon(now, name, session); ok {
		c.sendNamed(now, r)
	}
}

// namedDropSession ends every claim of a local session.
func (c *core) namedDropSession(now time.Time, session uint64) {
	for _, r := range c.named.claims.DropSession(now, session) {
		c.sendNamed(now, r)
	}
}

// namedList lists the leader's table when this node leads; otherwise it
// returns the leader to ask (zero when none is known).
func (c *core) namedList(now time.Time) ([]named.Info, bully.Node, error) {
	if !c.quorumMode() {
		return nil, bully.Node{}, errNamedAvailable
	}
	if t := c.namedTable(now); t != nil {
		return t.List(now), bully.Node{}, nil
	}
	return nil, c.m.Status().Leader, errNotLeaderHere
}

// takeNamedEvents returns and clears what happened to local sessions.
func (c *core) takeNamedEvents() []named.Event {
	ev := c.named.events
	c.named.events = nil
	return ev
}

// onNamedList answers another node's request for the leader's table.
func (c *core) onNamedList(now time.Time) *namedListReply {
	names, _, err := c.namedList(now)
	if err != nil {
		return &namedListReply{leaderReply: leaderReply{Code: "not_leader", Error: err.Error()}}
	}
	return &namedListReply{Names: names}
}
