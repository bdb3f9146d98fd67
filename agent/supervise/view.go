package supervise

import (
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// consistencyAvailable is the status's consistency value for the mode
// without leases.
const consistencyAvailable = "available"

// term is one leadership term of this node: what a command runs for.
type term struct {
	epoch  uint64
	leader string
}

// view is what Run knows of the agent: the latest status and the latest
// leadership event. The command runs only while both say this node leads
// the same term: the event stream is ordered, so a status that is newer than
// the events read so far waits for them, and an event that ended the term
// is never overruled by a status read before it.
type view struct {
	connected bool

	haveStatus bool
	status     rpc.Status
	statusAt   time.Time // when the status was asked for

	haveStream bool
	stream     *rpc.LeaderInfo // the leader per the latest leadership event
	streamSelf bool            // that event named this node (the event's node) leader
}

// applyStatus records a status asked for at sentAt.
func (v *view) applyStatus(st rpc.Status, sentAt time.Time) {
	v.connected = true
	v.haveStatus, v.status, v.statusAt = true, st, sentAt
}

// applyEvent records a leadership event; other events change nothing.
func (v *view) applyEvent(ev rpc.Event) {
	v.connected = true
	switch ev.Event {
	case rpc.EventLeaderChanged, rpc.EventBecameLeader, rpc.EventNoLeader:
		v.haveStream, v.stream, v.streamSelf = true, nil, false
		if ev.Leader != nil {
			l := *ev.Leader
			v.stream, v.streamSelf = &l, l.Node == ev.Node
		}
	case rpc.EventLostLeadership:
		v.haveStream, v.stream, v.streamSelf = true, nil, false
	}
}

// selfLeads returns the epoch of the term a leadership event says this
// node (the event's node) leads, if it says so.
func selfLeads(ev rpc.Event) (uint64, bool) {
	l := ev.Leader
	if (ev.Event != rpc.EventLeaderChanged && ev.Event != rpc.EventBecameLeader) || l == nil || l.Node != ev.Node {
		return 0, false
	}
	return l.Epoch, true
}

// streamLeads reports whether the latest leadership event says this node
// leads term epoch.
func (v *view) streamLeads(epoch uint64) bool {
	return v.streamSelf && v.stream != nil && v.stream.Epoch == epoch
}

// disconnect forgets everything: after a reconnection only fresh answers
// count.
func (v *view) disconnect() { *v = view{} }

// verdict says whether the command should run at now, and for which term;
// when it should not, why says why.
func (v *view) verdict(now time.Time, grace time.Duration) (t term, run bool, why string) {
	st := v.status
	switch {
	case !v.connected:
		return term{}, false, "the agent is unreachable"
	case !v.haveStatus || !v.haveStream:
		return term{}, false, "waiting for the agent's status and events"
	case !st.IsLeader:
		return term{}, false, "this node does not lead"
	case st.Leader == nil || st.Leader.Node != st.Node || st.Leader.ID != st.ID:
		return term{}, false, "the status names another leader"
	case v.stream == nil || v.stream.Node != st.Node || v.stream.ID != st.ID:
		return term{}, false, "the agent's events say this node does not lead"
	case v.stream.Epoch != st.Leader.Epoch:
		return term{}, false, "the agent's events and status name different terms"
	}
	if why := v.leaseProblem(now, grace); why != "" {
		return term{}, false, why
	}
	return term{epoch: st.Leader.Epoch, leader: st.Node}, true, ""
}

// leaseProblem says why the lease forbids running at now, or "".
func (v *view) leaseProblem(now time.Time, grace time.Duration) string {
	ms := v.status.LeaseRemainingMS
	switch {
	case ms == 0 && v.status.Consistency == consistencyAvailable:
		return "" // no lease in available mode
	case ms <= 0:
		return "the lease has expired"
	case v.leaseDeadline().Sub(now) < grace:
		return "the lease ends within the grace"
	}
	return ""
}

// leaseDeadline is when the lease ends, by the latest status: counted from
// when the status was asked for, so never later than the agent's deadline.
func (v *view) leaseDeadline() time.Time {
	return v.statusAt.Add(time.Duration(v.status.LeaseRemainingMS) * time.Millisecond)
}

// recheckAt is when the verdict turns false without news, if it is true
// now: the lease deadline less the grace; zero when there is no lease.
func (v *view) recheckAt(grace time.Duration) time.Time {
	if !v.haveStatus || v.status.LeaseRemainingMS <= 0 {
		return time.Time{}
	}
	return v.leaseDeadline().Add(-grace)
}
