package supervise

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

func TestVerdict(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const g = time.Second
	self := func(epoch uint64) *rpc.LeaderInfo { return &rpc.LeaderInfo{Node: "n1", ID: 1, Epoch: epoch} }
	leading := func(mode string, leaseMS int64) rpc.Status {
		return rpc.Status{Node: "n1", ID: 1, IsLeader: true, Leader: self(5), Consistency: mode, LeaseRemainingMS: leaseMS}
	}
	for _, tc := range []struct {
		name   string
		view   view
		now    time.Time
		run    bool
		reason string
	}{
		{"unreachable", view{}, t0, false, "the agent is unreachable"},
		{"no status yet", view{connected: true, haveStream: true, stream: self(5)}, t0, false, "waiting for the agent's status and events"},
		{"no event yet", view{connected: true, haveStatus: true, status: leading("available", 0)}, t0, false, "waiting for the agent's status and events"},
		{"follower", view{connected: true, haveStatus: true, haveStream: true, stream: self(5),
			status: rpc.Status{Node: "n1", ID: 1, Leader: &rpc.LeaderInfo{Node: "n2", ID: 2, Epoch: 5}}}, t0, false, "this node does not lead"},
		{"events behind", view{connected: true, haveStatus: true, haveStream: true, stream: self(4), status: leading("available", 0)},
			t0, false, "the agent's events and status name different terms"},
		{"lost by event", view{connected: true, haveStatus: true, haveStream: true, status: leading("available", 0)},
			t0, false, "the agent's events say this node does not lead"},
		{"another leader by event", view{connected: true, haveStatus: true, haveStream: true, status: leading("available", 0),
			stream: &rpc.LeaderInfo{Node: "n2", ID: 2, Epoch: 6}}, t0, false, "the agent's events say this node does not lead"},
		{"available, no lease", view{connected: true, haveStatus: true, haveStream: true, stream: self(5), status: leading("available", 0)},
			t0, true, ""},
		{"quorum, 0 is expired", view{connected: true, haveStatus: true, haveStream: true, stream: self(5), status: leading("quorum", 0)},
			t0, false, "the lease has expired"},
		{"quorum, lease beyond grace", view{connected: true, haveStatus: true, haveStream: true, stream: self(5), status: leading("quorum", 3000), statusAt: t0},
			t0.Add(2 * time.Second), true, ""},
		{"quorum, lease within grace", view{connected: true, haveStatus: true, haveStream: true, stream: self(5), status: leading("quorum", 3000), statusAt: t0},
			t0.Add(2001 * time.Millisecond), false, "the lease ends within the grace"},
		{"unknown mode, 0 is expired", view{connected: true, haveStatus: true, haveStream: true, stream: self(5), status: leading("", 0)},
			t0, false, "the lease has expired"},
	} {
		got, run, why := tc.view.verdict(tc.now, g)
		if run != tc.run || why != tc.reason || (run && got != (term{epoch: 5, leader: "n1"})) {
			t.Errorf("%s: verdict = %+v, %v, %q; want %v, %q", tc.name, got, run, why, tc.run, tc.reason)
		}
	}
}

func TestViewEvents(t *testing.T) {
	var v view
	v.applyEvent(rpc.Event{Event: rpc.EventBecameLeader, Leader: &rpc.LeaderInfo{Node: "n1", ID: 1, Epoch: 5}})
	if !v.haveStream || v.stream == nil || v.stream.Epoch != 5 {
		t.Fatalf("after became-leader: %+v", v)
	}
	v.applyEvent(rpc.Event{Event: rpc.EventMemberJoin, Leader: &rpc.LeaderInfo{Node: "n2", ID: 2, Epoch: 4}})
	if v.stream == nil || v.stream.Epoch != 5 {
		t.Errorf("a member event changed the leader: %+v", v.stream)
	}
	v.applyEvent(rpc.Event{Event: rpc.EventLostLeadership, Leader: &rpc.LeaderInfo{Node: "n1", ID: 1, Epoch: 5}})
	if v.stream != nil {
		t.Errorf("after lost-leadership: %+v", v.stream)
	}
	v.disconnect()
	if v.connected || v.haveStatus || v.haveStream {
		t.Errorf("after disconnect: %+v", v)
	}
}

func TestRecheckAt(t *testing.T) {
	t0 := time.Unix(1000, 0)
	v := view{haveStatus: true, statusAt: t0, status: rpc.Status{LeaseRemainingMS: 3000}}
	if got, want := v.recheckAt(time.Second), t0.Add(2*time.Second); !got.Equal(want) {
		t.Errorf("recheckAt = %v, want %v", got, want)
	}
	v.status.LeaseRemainingMS = 0
	if got := v.recheckAt(time.Second); !got.IsZero() {
		t.Errorf("recheckAt without a lease = %v, want zero", got)
	}
}

func TestPollInterval(t *testing.T) {
	for _, tc := range []struct{ grace, want time.Duration }{
		{5 * time.Second, 500 * time.Millisecond},
		{time.Second, 250 * time.Millisecond},
		{20 * time.Millisecond, 10 * time.Millisecond},
	} {
		if got := (Config{Grace: tc.grace}).pollInterval(); got != tc.want {
			t.Errorf("pollInterval(grace %v) = %v, want %v", tc.grace, got, tc.want)
		}
	}
}
