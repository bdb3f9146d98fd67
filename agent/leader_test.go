package agent

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/rpc"
)

// fixedClock is a Clock that always reads the same instant.
type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// TestLeaderAgreesWithStatus: the leader op's answer, which skips building
// the status, is the status's Leader, or no_leader with its Reason, for
// every kind of snapshot: a follower that knows a leader or none, a leader
// with its lease valid or run out, in both consistency modes.
func TestLeaderAgreesWithStatus(t *testing.T) {
	now := time.Unix(1000, 0)
	self, other := bully.Node{Name: "n1", ID: 1}, bully.Node{Name: "n3", ID: 3}
	snaps := map[string]snapshot{
		"follower":          {state: "follower", status: bully.Status{Leader: other, Term: 7, Epoch: 7}},
		"no leader":         {state: "candidate", reason: "election in progress"},
		"no reason":         {state: "follower"},
		"leader":            {state: "leader", status: bully.Status{Leader: self, Term: 9, Epoch: 9}, deadline: now.Add(time.Second)},
		"lease ran out":     {state: "leader", status: bully.Status{Leader: self, Term: 9, Epoch: 9}, deadline: now},
		"leader, no quorum": {state: "no-quorum", reason: "no quorum: n2 unreachable"},
	}
	for _, mode := range []Consistency{Quorum, Available} {
		for name, snap := range snaps {
			t.Run(fmt.Sprintf("%s/%s", mode, name), func(t *testing.T) {
				a := &Agent{cfg: Config{Name: "n1", ID: 1, Consistency: mode, Clock: fixedClock(now)}}
				a.snap.Store(&snap)
				st := a.Status()
				l, err := a.leader()
				switch {
				case st.Leader == nil:
					want := st.Reason
					if want == "" {
						want = "no leader is known"
					}
					if !errors.Is(err, rpc.ErrNoLeader) || err.Error() != want+": "+rpc.ErrNoLeader.Error() {
						t.Fatalf("leader() = %+v, %v; want no_leader with reason %q", l, err, want)
					}
				case err != nil || l != *st.Leader:
					t.Fatalf("leader() = %+v, %v; want %+v", l, err, *st.Leader)
				}
			})
		}
	}
}
