package agent

import (
	"cmp"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/agent/hooks"
	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/leasing"
	"github.com/tenurehq/tenure/rpc"
)

// snapshot is the view the socket reads; the driver publishes a new one
// (Agent.snap) after every input to the core. A published snapshot is
// never changed: readers share it without a lock.
type snapshot struct {
	status   bully.Status
	deadline time.Time // lease validity end (quorum mode, when leading)
	state    string
	reason   string
	quorum   leasing.Quorum
	roster   leasing.Roster
	storage  string // the last failed write to the data dir, "" when none
	members  int
	// changed is the wall-clock time of the last leadership event (or of
	// the agent's start): when the leadership this snapshot reports began,
	// as a watch's first event tells it.
	changed time.Time
}

// snapshot captures the core's view at now.
func (c *core) snapshot(now time.Time) snapshot {
	st := c.m.Status()
	s := snapshot{status: st, quorum: c.statusQuorum(), roster: c.roster()}
	if err := c.storageFailure(); err != nil {
		s.storage = err.Error()
	}
	if c.leading() && c.quorumMode() {
		s.deadline = c.lease.deadline
	}
	switch {
	case c.leading():
		s.state = "leader"
	case st.State.Campaigning():
		s.state = "candidate"
	case st.Leader.IsZero() && c.rounds.noQuorum != "":
		s.state = "no-quorum"
	default:
		s.state = "follower"
	}
	switch {
	case !st.Leader.IsZero():
	case c.rounds.noQuorum != "":
		s.reason = c.rounds.noQuorum
	case st.State.Campaigning():
		s.reason = "election in progress"
	default:
		s.reason = "no leader elected yet"
	}
	return s
}

// valid reports whether the snapshot's node leads with a valid lease at now.
func (s snapshot) valid(now time.Time, quorum bool) bool {
	if s.state != "leader" {
		return false
	}
	return !quorum || now.Before(s.deadline)
}

// publishStatus records the core's view and emits the leadership events its
// change implies, all stamped with one time, which the snapshot keeps for
// the first event of later watches.
func (a *Agent) publishStatus(now time.Time) {
	snap := a.core.snapshot(now)
	old := *a.snap.Load()
	a.journal.observe(old, snap) // before anyone can read the new status
	at := time.Now()
	snap.members, snap.changed = old.members, old.changed
	wasLeader, isLeader := old.state == "leader", snap.state == "leader"
	st, was := snap.status, old.status
	moved := was.Leader != st.Leader || was.Term != st.Term
	if moved || wasLeader != isLeader {
		snap.changed = at
	}
	a.snap.Store(&snap)
	self := a.self()
	if snap.state == "candidate" && old.state != "candidate" {
		a.counts.add("election.started")
	}
	if isLeader && (!wasLeader || st.Term != was.Term) {
		a.counts.add("election.won")
	}
	if wasLeader && !isLeader {
		a.log.Info("lost leadership", "epoch", was.Term)
		a.emit(at, rpc.Event{Event: rpc.EventLostLeadership, Leader: successor(st, self), Epoch: was.Term})
	}
	if !moved {
		return
	}
	if st.Leader.IsZero() {
		a.log.Info("no leader", "last", was.Leader.Name, "reason", snap.reason, "forgot", st.Lost)
		a.emit(at, rpc.Event{Event: rpc.EventNoLeader, Forgot: st.Lost})
		return
	}
	a.log.Info("leader changed", "leader", st.Leader.Name, "epoch", st.Term)
	l := leaderInfo(st.Leader, st.Term)
	a.emit(at, rpc.Event{Event: rpc.EventLeaderChanged, Leader: l, Epoch: st.Term})
	if isLeader && !wasLeader {
		a.emit(at, rpc.Event{Event: rpc.EventBecameLeader, Leader: l, Epoch: st.Term})
	}
}

// publishMembers records the number of alive members in the status. Like
// publishStatus, it runs on the driver, the only writer of Agent.snap.
func (a *Agent) publishMembers(alive int) {
	snap := *a.snap.Load()
	snap.members = alive
	a.snap.Store(&snap)
}

// successor is the leader after this node lost leadership, as a
// lost-leadership event names it: the node that leads now, once known; nil
// while none is, or while the election still names this node in its ended
// term.
func successor(st bully.Status, self bully.Node) *rpc.LeaderInfo {
	if st.Leader == self {
		return nil
	}
	return leaderInfo(st.Leader, st.Term)
}

// emit publishes ev, a leadership event of this node, at at: it fills in
// the event's time and this node as its node.
func (a *Agent) emit(at time.Time, ev rpc.Event) {
	ev.Time, ev.Node = formatTime(at), a.cfg.Name
	a.publish(ev)
}

// formatTime formats an event's time: RFC 3339 with nanoseconds, UTC.
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// publish sends an event to watchers and hooks. It runs on the driver
// goroutine, so events keep their order.
func (a *Agent) publish(ev rpc.Event) {
	a.events.publish(ev)
	a.hookRunner().Dispatch(hooks.FromRPC(ev, a.cfg.Name, a.cfg.ID))
}

func leaderInfo(n bully.Node, term uint64) *rpc.LeaderInfo {
	if n.IsZero() {
		return nil
	}
	return &rpc.LeaderInfo{Node: n.Name, ID: n.ID, Epoch: term}
}

// reasonLapsed is the reason a leader whose lease ran out since the last
// tick reports.
const reasonLapsed = "lease expired; stepping down"

// leader returns the leader Status reports, or an error wrapping
// rpc.ErrNoLeader with the Reason it gives. It reads the published
// snapshot as Status does but builds nothing else, and reads the clock
// only when this node leads: the socket's leader op, the query programs
// make most, answers with it.
func (a *Agent) leader() (rpc.LeaderInfo, error) {
	snap := a.snap.Load()
	l, reason := snap.status.Leader, snap.reason
	if snap.state == "leader" && !snap.valid(a.cfg.Clock.Now(), a.cfg.Consistency == Quorum) {
		l, reason = bully.Node{}, reasonLapsed
	}
	if l.IsZero() {
		return rpc.LeaderInfo{}, fmt.Errorf("%s: %w", cmp.Or(reason, "no leader is known"), rpc.ErrNoLeader)
	}
	return rpc.LeaderInfo{Node: l.Name, ID: l.ID, Epoch: snap.status.Term}, nil
}

// Status returns this node's view, as the socket's status op reports it.
// Whether this node leads is decided at the moment of the call against the
// lease deadline, not at the last tick.
func (a *Agent) Status() rpc.Status {
	st, _ := a.statusSince()
	return st
}

// statusSince is Status, with the wall-clock time from which the
// leadership it reports holds: the last leadership event's, or the lease
// deadline's when the lease of a leader ran out since the last tick.
func (a *Agent) statusSince() (rpc.Status, time.Time) {
	snap := a.snap.Load()
	now := a.cfg.Clock.Now()
	since := snap.changed
	quorum := a.cfg.Consistency == Quorum
	st := snap.status
	out := rpc.Status{
		Node:        a.cfg.Name,
		ID:          a.cfg.ID,
		IsLeader:    snap.valid(now, quorum),
		Leader:      leaderInfo(st.Leader, st.Term),
		Epoch:       st.Epoch,
		Members:     snap.members,
		State:       snap.state,
		Consistency: string(a.cfg.Consistency),
		Reason:      snap.reason,
		Drained:     a.drained.Load(),
		Storage:     snap.storage,
	}
	if out.IsLeader && quorum {
		out.LeaseRemainingMS = snap.deadline.Sub(now).Milliseconds()
	}
	if snap.state == "leader" && !out.IsLeader {
		out.State, out.Leader, out.Reason = "no-quorum", nil, reasonLapsed
		since = time.Now().Add(snap.deadline.Sub(now)) // the deadline, on the wall clock
	}
	if quorum {
		out.LeaseTTLMS = a.cfg.LeaseTTL.Milliseconds()
		out.Quorum = &rpc.QuorumInfo{Have: snap.quorum.Have, Need: snap.quorum.Need}
		if !snap.roster.IsZero() {
			out.Roster = &rpc.RosterInfo{ClusterID: snap.roster.ClusterID, Version: snap.roster.Version, Voters: snap.roster.Names()}
		}
	}
	return out, since
}
