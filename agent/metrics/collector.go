package metrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("tenure_"+name, help, labels, nil)
}

// The metric families, read from the agent at each scrape.
var (
	descLeader         = desc("leader", "1 when this node leads with a valid lease, else 0.")
	descState          = desc("state", "1 for this node's current election state.", "state")
	descEpoch          = desc("epoch", "Highest epoch this node knows of (used or seen).")
	descLeaderEpoch    = desc("leader_epoch", "Epoch of the term of the leader this node knows, 0 when it knows none.")
	descLeaseRemaining = desc("lease_remaining_seconds", "Time left on this node's lease while it leads, else 0.")
	descQuorumHave     = desc("quorum_have", "Grants in this node's last lease round.")
	descQuorumNeed     = desc("quorum_need", "Grants a lease needs under this node's roster.")
	descVoters         = desc("roster_voters", "Voters in the roster this node holds.")
	descStorage        = desc("storage_failing", "1 while writes to this node's data dir fail (it does not lead until one succeeds), else 0.")
	descMembers        = desc("members", "Members this node's gossip knows, by status and role.", "status", "role")
	descLease          = desc("lease_events_total", "Lease rounds concluded by this node, by outcome (acquired, acquire_failed, renewed, renew_failed), renewals that got their majority from answers after their budget (renewed_late), leases that expired unrenewed (expired), and grants that came after their acquire round failed, released again (late_grant_released).", "event")
	descElections      = desc("elections_started_total", "Times this node became a candidate.")
	descWon            = desc("terms_led_total", "Terms this node has led (elections won with a lease).")
	descPeerMsgs       = desc("peer_messages_total", "Peer messages by direction (sent, received as requests, replies received) and type.", "direction", "type")
	descPeerBytes      = desc("peer_bytes_total", "Bytes of peer messages by direction (sent, received) and type.", "direction", "type")
	descPeerConns      = desc("peer_connections_total", "Peer transport connections: dialed, accepted, refused (at the connection limit).", "kind")
	descPeerLate       = desc("peer_late_total", "Peer exchanges that outlasted their caller: responses that came after their call ended (response), requests that came after their caller gave up, answered with an error and not handled (request).", "kind")
	descSocketRefused  = desc("socket_connections_refused_total", "Local socket connections turned away at the socket's limits.")
	descGossip         = desc("gossip_events_total", "Gossip membership events by type.", "type")
	descHooks          = desc("hook_runs_total", "Hook runs by outcome (ok, failed, timeout, aborted, cannot-start).", "outcome")
	descHookSeconds    = desc("hook_run_seconds_total", "Time spent in hook runs by outcome; divide by hook_runs_total for the mean.", "outcome")
	descRunStarted     = desc("run_children_started_total", "Commands `tenure run` clients reported started under this agent.")
	descRunStopped     = desc("run_terms_stopped_total", "Term ends `tenure run` clients reported their command stopped for.")
)

// collector turns an agent's status, members and counters into metrics.
type collector struct{ src Source }

// Describe sends the fixed descriptors.
func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLeader, descState, descEpoch, descLeaderEpoch, descLeaseRemaining,
		descQuorumHave, descQuorumNeed, descVoters, descStorage, descMembers, descLease, descElections, descWon, descPeerMsgs,
		descPeerBytes, descPeerConns, descPeerLate, descSocketRefused, descGossip, descHooks, descHookSeconds, descRunStarted, descRunStopped} {
		ch <- d
	}
}

// Collect reads the agent once and sends every metric.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	st := c.src.Status()
	gauge(descLeader, boolValue(st.IsLeader))
	for _, s := range []string{"leader", "candidate", "follower", "no-quorum"} {
		gauge(descState, boolValue(st.State == s), s)
	}
	gauge(descEpoch, float64(st.Epoch))
	var leaderEpoch float64
	if st.Leader != nil {
		leaderEpoch = float64(st.Leader.Epoch)
	}
	gauge(descLeaderEpoch, leaderEpoch)
	gauge(descLeaseRemaining, float64(max(st.LeaseRemainingMS, 0))/1000)
	if q := st.Quorum; q != nil {
		gauge(descQuorumHave, float64(q.Have))
		gauge(descQuorumNeed, float64(q.Need))
	}
	if r := st.Roster; r != nil {
		gauge(descVoters, float64(len(r.Voters)))
	}
	gauge(descStorage, boolValue(st.Storage != ""))
	c.members(gauge)
	c.counters(counter)
}

// members counts the members by status and role.
func (c collector) members(gauge func(*prometheus.Desc, float64, ...string)) {
	type key struct{ status, role string }
	n := map[key]int{}
	for _, m := range c.src.Members() {
		n[key{m.Status, m.Role}]++
	}
	for k, v := range n {
		gauge(descMembers, float64(v), k.status, k.role)
	}
}

// counters maps the agent's counters (agent.Agent.Counters) to families.
func (c collector) counters(counter func(*prometheus.Desc, float64, ...string)) {
	for key, v := range c.src.Counters() {
		kind, sub, _ := strings.Cut(key, ".")
		f := float64(v)
		switch kind {
		case "lease":
			counter(descLease, f, sub)
		case "election":
			if sub == "started" {
				counter(descElections, f)
			} else if sub == "won" {
				counter(descWon, f)
			}
		case "send":
			counter(descPeerMsgs, f, "sent", sub)
		case "recv":
			counter(descPeerMsgs, f, "received", sub)
		case "reply":
			counter(descPeerMsgs, f, "reply", sub)
		case "send_bytes":
			counter(descPeerBytes, f, "sent", sub)
		case "recv_bytes":
			counter(descPeerBytes, f, "received", sub)
		case "peer":
			switch sub {
			case "late":
				counter(descPeerLate, f, "response")
			case "late_request":
				counter(descPeerLate, f, "request")
			default:
				counter(descPeerConns, f, sub)
			}
		case "socket":
			if sub == "refused" {
				counter(descSocketRefused, f)
			}
		case "gossip":
			counter(descGossip, f, sub)
		case "hook":
			counter(descHooks, f, sub)
		case "hook_ms":
			counter(descHookSeconds, f/1000, sub)
		case "run":
			if sub == "started" {
				counter(descRunStarted, f)
			} else if sub == "stopped" {
				counter(descRunStopped, f)
			}
		}
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
