package agent

import (
	"context"
	"errors"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/rpc"
)

// backend serves the local socket's operations from the agent.
type backend struct{ a *Agent }

func (b backend) Status(context.Context) (rpc.Status, error) { return b.a.Status(), nil }

func (b backend) Leader(context.Context) (rpc.LeaderInfo, error) {
	st := b.a.Status()
	if st.Leader == nil {
		return rpc.LeaderInfo{}, rpc.ErrNoLeader
	}
	return *st.Leader, nil
}

func (b backend) Members(context.Context) ([]rpc.Member, error) {
	return b.a.Members(), nil
}

func (b backend) Resign(ctx context.Context) error { return b.a.Resign(ctx) }

// Watch streams events, starting with the current leadership as a
// leader-changed (or no-leader) event.
func (b backend) Watch(context.Context) (<-chan rpc.Event, func(), error) {
	ch, cancel := b.a.events.subscribe(func() rpc.Event {
		st := b.a.Status()
		first := rpc.Event{
			Time:   time.Now().UTC().Format(time.RFC3339Nano),
			Event:  rpc.EventLeaderChanged,
			Leader: st.Leader,
			Node:   st.Node,
		}
		if st.Leader == nil {
			first.Event = rpc.EventNoLeader
		}
		return first
	})
	return ch, cancel, nil
}

// Members returns every member gossip knows, with its status.
func (a *Agent) Members() []rpc.Member {
	leader := a.Status().Leader
	var out []rpc.Member
	for _, m := range a.members.Members() {
		out = append(out, a.rpcMember(m, leader))
	}
	return out
}

// Resign makes this node stop leading for a while (the election's resign
// hold); it returns rpc.ErrNotLeader when the node does not lead.
func (a *Agent) Resign(ctx context.Context) error {
	var err error
	if derr := a.do(ctx, func() {
		err = a.core.resign(a.cfg.Clock.Now())
		a.flush()
	}); derr != nil {
		return derr
	}
	if errors.Is(err, bully.ErrNotLeader) {
		return rpc.ErrNotLeader
	}
	return err
}
