package agent

import (
	"strings"
	"sync"
)

// counters count an agent's work by kind, to find what grows with the
// size of the fleet (see Agent.Counters). Safe for concurrent use.
type counters struct {
	mu sync.Mutex
	m  map[string]uint64
}

func (c *counters) add(key string) { c.addN(key, 1) }

// addN adds n to the count of key.
func (c *counters) addN(key string, n uint64) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]uint64{}
	}
	c.m[key] += n
	c.mu.Unlock()
}

func (c *counters) snapshot() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]uint64, len(c.m)+4)
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// Counters returns how much work this agent has done since it started, by
// kind: peer messages sent ("send.KIND"), received as requests
// ("recv.KIND") and as replies ("reply.KIND"), KIND being the message's
// type ("election", "coordinator", "lease.acquire", "floor_query", ...);
// gossip events by type ("gossip.member-join", ...); membership syncs into
// the core ("sync_members"); gossip tag updates ("set_tags"); driver
// flushes, each publishing the status and sending what the core queued
// ("flush"); the peer transport's connections ("peer.dialed",
// "peer.accepted", "peer.refused", "peer.late": responses that came
// after their call had ended, and "peer.late_request": requests that came
// after their caller gave up, not handled); local socket connections turned
// away at its limits ("socket.refused"); bytes of peer messages
// ("send_bytes.KIND", "recv_bytes.KIND"); lease rounds and expiries
// ("lease.acquired", "lease.acquire_failed", "lease.renewed",
// "lease.renew_failed", "lease.renewed_late": renewals that got their
// majority from answers after their budget, "lease.expired", and
// "lease.late_grant_released": grants that came after their acquire round
// failed, released again);
// periodic announcements not repeated to a member the last one had not
// yet reached ("announce.repeat_skipped"); candidacies and terms led
// ("election.started", "election.won"); hook runs and their time by
// outcome ("hook.OUTCOME", "hook_ms.OUTCOME"); and the reports of `tenure
// run` clients ("run.started", "run.stopped"). Package agent/metrics
// serves them as Prometheus metrics; the names here may change between
// versions, the metric names there are kept stable.
func (a *Agent) Counters() map[string]uint64 {
	out := a.counts.snapshot()
	if a.peers != nil {
		out["peer.dialed"] = a.peers.Dialed()
		out["peer.accepted"] = a.peers.Accepted()
		out["peer.refused"] = a.peers.Refused()
		out["peer.late"] = a.peers.LateResponses()
		out["peer.late_request"] = a.peers.LateRequests()
	}
	if a.server != nil {
		out["socket.refused"] = a.server.Refused()
	}
	return out
}

// countSent counts a peer message of kind about to be sent, and its bytes.
func (a *Agent) countSent(kind string, body []byte) {
	a.counts.add("send." + kind)
	a.counts.addN("send_bytes."+kind, uint64(len(body)))
}

// kind names an envelope's message for the counters.
func (env envelope) kind() string {
	switch {
	case env.Bully != nil:
		return strings.ToLower(env.Bully.Type.String())
	case env.Lease != nil:
		return "lease." + env.Lease.Kind.String()
	case env.LeaseReply != nil:
		return "lease_reply"
	case env.RosterFetch:
		return "roster_fetch"
	case env.Roster != nil:
		return "roster"
	case env.RosterUpdate != nil:
		return "roster_update"
	case env.RosterAck != nil:
		return "roster_ack"
	case env.FloorQuery:
		return "floor_query"
	case env.Floor != nil:
		return "floor"
	case env.Pledge != nil:
		return "pledge"
	case env.PledgeReply != nil:
		return "pledge_reply"
	case env.ForceLeave != "":
		return "force_leave"
	case env.ForceLeaveReply != nil:
		return "force_leave_reply"
	case env.Transfer != "":
		return "transfer"
	case env.TransferReply != nil:
		return "transfer_reply"
	case env.CanTake:
		return "can_take"
	case env.CanTakeReply != nil:
		return "can_take_reply"
	case env.Named != nil:
		return "named." + env.Named.Op.String()
	case env.NamedReply != nil:
		return "named_reply"
	case env.NamedList:
		return "named_list"
	case env.NamedListReply != nil:
		return "named_list_reply"
	}
	return "empty"
}
