package agent

import (
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/rpc"
)

// snapshot is the view the socket reads; the driver updates it.
type snapshot struct {
	status  bully.Status
	members int
}

// publishStatus records the machine's status and emits the leadership
// events its change implies.
func (a *Agent) publishStatus(st bully.Status) {
	a.mu.Lock()
	old := a.snap.status
	a.snap.status = st
	a.mu.Unlock()
	self := a.self()
	wasLeader, isLeader := old.State == bully.StateLeader, st.State == bully.StateLeader
	if wasLeader && !isLeader {
		a.log.Info("lost leadership", "epoch", old.Term)
		a.emit(rpc.EventLostLeadership, self.Name, old.Leader, old.Term)
	}
	if old.Leader == st.Leader && old.Term == st.Term {
		return
	}
	if st.Leader.IsZero() {
		a.log.Info("no leader", "last", old.Leader.Name)
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
	a.events.publish(rpc.Event{
		Time:   time.Now().UTC().Format(time.RFC3339Nano),
		Event:  event,
		Leader: leaderInfo(leader, term),
		Node:   node,
	})
}

func leaderInfo(n bully.Node, term uint64) *rpc.LeaderInfo {
	if n.IsZero() {
		return nil
	}
	return &rpc.LeaderInfo{Node: n.Name, ID: n.ID, Epoch: term}
}

// Status returns this node's view, as the socket's status op reports it.
func (a *Agent) Status() rpc.Status {
	a.mu.Lock()
	snap := a.snap
	a.mu.Unlock()
	st := snap.status
	out := rpc.Status{
		Node:        a.cfg.Name,
		ID:          a.cfg.ID,
		IsLeader:    st.State == bully.StateLeader,
		Leader:      leaderInfo(st.Leader, st.Term),
		Epoch:       st.Epoch,
		Members:     snap.members,
		State:       stateName(st.State),
		Consistency: string(a.cfg.Consistency),
	}
	if out.Leader == nil {
		out.Reason = "no leader elected yet"
		if st.State.Campaigning() {
			out.Reason = "election in progress"
		}
	}
	return out
}

// stateName maps machine states to the socket's states: every state of a
// running election is "candidate".
func stateName(s bully.State) string {
	switch {
	case s == bully.StateLeader:
		return "leader"
	case s.Campaigning():
		return "candidate"
	default:
		return "follower"
	}
}
