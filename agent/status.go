package agent

import (
	"time"

	"github.com/tenurehq/tenure/agent/hooks"
	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/leasing"
	"github.com/tenurehq/tenure/rpc"
)

// snapshot is the view the socket reads; the driver updates it after every
// input to the core.
type snapshot struct {
	status   bully.Status
	deadline time.Time // lease validity end (quorum mode, when leading)
	state    string
	reason   string
	quorum   leasing.Quorum
	roster   leasing.Roster
	members  int
}

// snapshot captures the core's view at now.
func (c *core) snapshot(now time.Time) snapshot {
	st := c.m.Status()
	s := snapshot{status: st, quorum: c.statusQuorum(), roster: c.roster()}
	if c.leading() && c.quorumMode() {
		s.deadline = c.lease.deadline
	}
	switch {
	case c.leading():
		s.state = "leader"
	case st.State.Campaigning():
		s.state = "candidate"
	case st.Leader.IsZero() && c.noQuorum != "":
		s.state = "no-quorum"
	default:
		s.state = "follower"
	}
	switch {
	case !st.Leader.IsZero():
	case c.noQuorum != "":
		s.reason = c.noQuorum
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
// change implies.
func (a *Agent) publishStatus(now time.Time) {
	snap := a.core.snapshot(now)
	a.journal.observe(a.snap, snap) // before anyone can read the new status
	a.mu.Lock()
	old := a.snap
	snap.members = old.members
	a.snap = snap
	a.mu.Unlock()
	st, was := snap.status, old.status
	self := a.self()
	wasLeader, isLeader := old.state == "leader", snap.state == "leader"
	if snap.state == "candidate" && old.state != "candidate" {
		a.counts.add("election.started")
	}
	if isLeader && (!wasLeader || st.Term != was.Term) {
		a.counts.add("election.won")
	}
	if wasLeader && !isLeader {
		a.log.Info("lost leadership", "epoch", was.Term)
		a.emit(rpc.EventLostLeadership, self.Name, was.Leader, was.Term)
	}
	if was.Leader == st.Leader && was.Term == st.Term {
		return
	}
	if st.Leader.IsZero() {
		a.log.Info("no leader", "last", was.Leader.Name, "reason", snap.reason)
		a.emit(rpc.EventNoLeader, self.Name, st.Leader, 0)
		return
	}
	a.log.Info("leader changed", "leader", st.Leader.Name, "epoch", st.Term)
	a.emit(rpc.EventLeaderChanged, self.Name, st.Leader, st.Term)
	if isLeader && !wasLeader {
		a.emit(rpc.EventBecameLeader, self.Name, st.Leader, st.Term)
	}
}

func (a *Agent) emit(event, node string, leader bully.Node, term uint64) {
	a.publish(rpc.Event{
		Time:   time.Now().UTC().Format(time.RFC3339Nano),
		Event:  event,
		Leader: leaderInfo(leader, term),
		Node:   node,
	})
}

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

// Status returns this node's view, as the socket's status op reports it.
// Whether this node leads is decided at the moment of the call against the
// lease deadline, not at the last tick.
func (a *Agent) Status() rpc.Status {
	a.mu.Lock()
	snap := a.snap
	a.mu.Unlock()
	now := a.cfg.Clock.Now()
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
	}
	if out.IsLeader && quorum {
		out.LeaseRemainingMS = snap.deadline.Sub(now).Milliseconds()
	}
	if snap.state == "leader" && !out.IsLeader {
		out.State, out.Leader, out.Reason = "no-quorum", nil, "lease expired; stepping down"
	}
	if quorum {
		out.LeaseTTLMS = a.cfg.LeaseTTL.Milliseconds()
		out.Quorum = &rpc.QuorumInfo{Have: snap.quorum.Have, Need: snap.quorum.Need}
		if !snap.roster.IsZero() {
			out.Roster = &rpc.RosterInfo{ClusterID: snap.roster.ClusterID, Version: snap.roster.Version, Voters: snap.roster.Names()}
		}
	}
	return out
}
