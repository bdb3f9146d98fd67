package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/gossip"
	"github.com/tenurehq/tenure/rpc"
)

// Transfer makes the leader hand its term to the member name: this node
// does it when it leads, else it forwards the request to the leader it
// knows, as ForceLeave does. The leader resigns as for Resign (its local
// work stops before the lease is released) and names name as successor in
// its RESIGN; name takes over at once, and nodes that outrank it do not
// preempt that term. Success means the leader resigned and handed over;
// name leads within a few round trips, unless it fails to take the lease
// within the transfer window, and then the normal election picks the
// leader. Asked to transfer to the leader itself, it does nothing. Errors
// wrap rpc.ErrNotFound (no such member, or not alive),
// rpc.ErrInvalidArgument (it may not lead) or rpc.ErrNoLeader.
func (a *Agent) Transfer(ctx context.Context, name string) error {
	if err := a.checkSuccessor(name); err != nil {
		return err
	}
	var leader bully.Node
	var err error
	if derr := a.do(ctx, func() {
		leader, err = a.core.transfer(a.cfg.Clock.Now(), name)
		a.flush()
	}); derr != nil {
		return derr
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errTransferUnknown):
		return fmt.Errorf("%w: %v", rpc.ErrNotFound, err)
	case errors.Is(err, errTransferIneligible):
		return fmt.Errorf("%w: %v", rpc.ErrInvalidArgument, err)
	case leader.IsZero() || leader == a.self():
		return fmt.Errorf("%w: cannot transfer to %q now", rpc.ErrNoLeader, name)
	}
	return a.forwardTransfer(ctx, leader, name)
}

// checkSuccessor refuses, with the reason gossip gives, a successor that is
// not a live member or may not lead. The leader checks again in its own
// view.
func (a *Agent) checkSuccessor(name string) error {
	for _, m := range a.members.Members() {
		if m.Name != name {
			continue
		}
		switch {
		case m.Status != gossip.StatusAlive:
			return fmt.Errorf("%w: transfer: member %q is %s, not alive", rpc.ErrNotFound, name, m.Status)
		case m.Tags[drainedTag] == "1":
			return fmt.Errorf("%w: transfer: member %q is drained (tenure drain --off on it lifts that)", rpc.ErrInvalidArgument, name)
		case !m.Eligible:
			return fmt.Errorf("%w: transfer: member %q runs with --eligible=false and may not lead", rpc.ErrInvalidArgument, name)
		}
		return nil
	}
	return fmt.Errorf("%w: transfer: no member named %q", rpc.ErrNotFound, name)
}

// forwardTransfer asks leader, over the peer transport, to hand its term to
// name.
func (a *Agent) forwardTransfer(ctx context.Context, leader bully.Node, name string) error {
	return a.askLeader(ctx, leader, "transfer", envelope{Transfer: name},
		func(env envelope) *leaderReply { return env.TransferReply })
}
