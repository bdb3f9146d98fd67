package hooks

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// Event is what a hook run is told: its environment variables and its
// standard input are made from it (see the package documentation).
type Event struct {
	// Event is the event name: one of EventNames.
	Event string `json:"event"`
	// Time is when the event happened.
	Time time.Time `json:"time"`
	// Node is this agent's node name.
	Node string `json:"node"`
	// NodeID is this agent's node ID.
	NodeID uint64 `json:"node_id"`
	// Leader is the leader the event is about (for lost-leadership, the
	// leader of the term that ended: this node), or nil when none is known.
	Leader *LeaderRef `json:"leader"`
	// Epoch is the fencing token of the term the event is about; 0 when
	// there is none.
	Epoch uint64 `json:"epoch"`
	// Member is the member a member event is about; nil for other events.
	Member *MemberRef `json:"member,omitempty"`
	// Task and Token name the task of a task event and its fencing token.
	Task  string `json:"task,omitempty"`
	Token uint64 `json:"token,omitempty"`
}

// LeaderRef names a leader and its term.
type LeaderRef struct {
	// Node is the leader's node name.
	Node string `json:"node"`
	// ID is the leader's node ID.
	ID uint64 `json:"id"`
	// Epoch numbers the leader's term.
	Epoch uint64 `json:"epoch"`
}

// MemberRef names a cluster member.
type MemberRef struct {
	// Name is the member's node name.
	Name string `json:"name"`
	// ID is the member's node ID.
	ID uint64 `json:"id"`
	// Addr is the member's gossip address, host:port.
	Addr string `json:"addr"`
}

// FromRPC converts an event as the agent publishes it on its socket into a
// hook Event for this agent (node, nodeID). Epoch is the epoch of ev.Leader,
// the current term; for lost-leadership, whose ev.Leader is the successor
// (or nil), Leader is this node and Epoch the term that ended (ev.Epoch).
// A Time that does not parse as RFC 3339 becomes the current time.
func FromRPC(ev rpc.Event, node string, nodeID uint64) Event {
	t, err := time.Parse(time.RFC3339Nano, ev.Time)
	if err != nil {
		t = time.Now()
	}
	out := Event{Event: ev.Event, Time: t, Node: node, NodeID: nodeID}
	if l := ev.Leader; l != nil {
		out.Leader = &LeaderRef{Node: l.Node, ID: l.ID, Epoch: l.Epoch}
		out.Epoch = l.Epoch
	}
	if ev.Event == rpc.EventLostLeadership && ev.Epoch != 0 {
		out.Leader = &LeaderRef{Node: node, ID: nodeID, Epoch: ev.Epoch}
		out.Epoch = ev.Epoch
	}
	if m := ev.Member; m != nil {
		out.Member = &MemberRef{Name: m.Name, ID: m.ID, Addr: m.Addr}
	}
	out.Task, out.Token = ev.Task, ev.Token
	return out
}

// envNames lists every variable a run's environment sets, so that values
// inherited from the base environment never leak into a run.
var envNames = []string{
	"TENURE_EVENT", "TENURE_NODE", "TENURE_NODE_ID", "TENURE_LEADER", "TENURE_LEADER_ID",
	"TENURE_EPOCH", "TENURE_MEMBER", "TENURE_MEMBER_ID", "TENURE_MEMBER_ADDR", "TENURE_TASK", "TENURE_TOKEN",
}

// environ returns base without any of envNames, plus ev's variables.
func (ev Event) environ(base []string) []string {
	out := make([]string, 0, len(base)+len(envNames))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(envNames, name) {
			out = append(out, kv)
		}
	}
	var leader, leaderID string
	if ev.Leader != nil {
		leader, leaderID = ev.Leader.Node, u64(ev.Leader.ID)
	}
	out = append(out,
		"TENURE_EVENT="+ev.Event,
		"TENURE_NODE="+ev.Node,
		"TENURE_NODE_ID="+u64(ev.NodeID),
		"TENURE_LEADER="+leader,
		"TENURE_LEADER_ID="+leaderID,
		"TENURE_EPOCH="+u64(ev.Epoch))
	if m := ev.Member; m != nil && isMemberEvent(ev.Event) {
		out = append(out, "TENURE_MEMBER="+m.Name, "TENURE_MEMBER_ID="+u64(m.ID), "TENURE_MEMBER_ADDR="+m.Addr)
	}
	if ev.Task != "" {
		out = append(out, "TENURE_TASK="+ev.Task, "TENURE_TOKEN="+u64(ev.Token))
	}
	return out
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }

// stdin returns the JSON object a run reads on its standard input, with a
// final newline.
func (ev Event) stdin() []byte {
	ev.Time = ev.Time.UTC()
	b, err := json.Marshal(ev)
	if err != nil { // only a Time outside years 0-9999
		ev.Time = time.Time{}
		b, _ = json.Marshal(ev)
	}
	return append(b, '\n')
}
