package agent

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/gossip"
	"github.com/tenurehq/tenure/rpc"
)

// backend serves the local socket's operations from the agent.
type backend struct{ a *Agent }

func (b backend) Status(context.Context) (rpc.Status, error) { return b.a.Status(), nil }

// Leader returns the known leader, or rpc.ErrNoLeader with the reason
// status gives.
func (b backend) Leader(context.Context) (rpc.LeaderInfo, error) { return b.a.leader() }

func (b backend) Members(context.Context) ([]rpc.Member, error) {
	return b.a.Members(), nil
}

func (b backend) Resign(ctx context.Context, req rpc.ResignRequest) error {
	return b.a.ResignFor(ctx, time.Duration(req.HoldMS)*time.Millisecond)
}

func (b backend) Drain(ctx context.Context, req rpc.DrainRequest) error {
	return b.a.Drain(ctx, !req.Off)
}

func (b backend) Transfer(ctx context.Context, name string) error { return b.a.Transfer(ctx, name) }

// Watch streams events, starting with the current leadership as a
// leader-changed (or no-leader) event.
func (b backend) Watch(context.Context) (<-chan rpc.Event, func(), error) {
	ch, cancel := b.a.events.subscribe(b.currentLeader)
	return ch, cancel, nil
}

// currentLeader is a watch's first event: the current leadership, at the
// time of the leadership event that made it so (or of the agent's start).
func (b backend) currentLeader() rpc.Event {
	st, changed := b.a.statusSince()
	first := rpc.Event{
		Time:   formatTime(changed),
		Event:  rpc.EventLeaderChanged,
		Leader: st.Leader,
		Node:   st.Node,
	}
	if st.Leader == nil {
		first.Event = rpc.EventNoLeader
	} else {
		first.Epoch = st.Leader.Epoch
	}
	return first
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

// Resign is ResignFor with the election's resign hold.
func (a *Agent) Resign(ctx context.Context) error { return a.ResignFor(ctx, 0) }

// ResignFor makes this node stop leading and stay out of elections for hold
// (the election's resign hold when zero). It hands the term to the natural
// successor, passing over one that does not answer it (askSuccessor). It
// takes leadership back from no node that leads after it (it may lead
// again by election, when the cluster has no leader). It returns
// rpc.ErrNotLeader when the node does not lead.
func (a *Agent) ResignFor(ctx context.Context, hold time.Duration) error {
	if err := a.askSuccessor(ctx); err != nil {
		return err
	}
	var err error
	if derr := a.do(ctx, func() {
		err = a.core.resignFor(a.cfg.Clock.Now(), hold)
		a.flush()
	}); derr != nil {
		return derr
	}
	if errors.Is(err, bully.ErrNotLeader) {
		return rpc.ErrNotLeader
	}
	return err
}

func (b backend) Check(ctx context.Context, epoch uint64) (rpc.CheckResult, error) {
	return b.a.Check(epoch), nil
}

func (b backend) ForceLeave(ctx context.Context, name string) error { return b.a.ForceLeave(ctx, name) }

// Check reports whether epoch is the term this node leads right now with a
// valid lease.
func (a *Agent) Check(epoch uint64) rpc.CheckResult {
	st := a.Status()
	res := rpc.CheckResult{IsLeader: st.IsLeader, LeaseRemainingMS: st.LeaseRemainingMS}
	if st.Leader != nil {
		res.Epoch = st.Leader.Epoch
	}
	res.Current = st.IsLeader && res.Epoch == epoch
	return res
}

// ForceLeave removes the voter name from the roster: this node does it when
// it leads, else it forwards the request to the leader it knows. Errors wrap
// rpc.ErrNoLeader, rpc.ErrNotFound or rpc.ErrInvalidArgument.
func (a *Agent) ForceLeave(ctx context.Context, name string) error {
	var leader bully.Node
	var err error
	if derr := a.do(ctx, func() {
		leader, err = a.core.forceLeave(a.cfg.Clock.Now(), name)
		a.flush()
	}); derr != nil {
		return derr
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errForceLeaveUnknown):
		return fmt.Errorf("%w: %v", rpc.ErrNotFound, err)
	case errors.Is(err, errForceLeaveSelf):
		return fmt.Errorf("%w: %v", rpc.ErrInvalidArgument, err)
	case leader.IsZero() || leader == a.self():
		return fmt.Errorf("%w: cannot force-leave %q now", rpc.ErrNoLeader, name)
	}
	return a.forwardForceLeave(ctx, leader, name)
}

func (a *Agent) forwardForceLeave(ctx context.Context, leader bully.Node, name string) error {
	return a.askLeader(ctx, leader, "force-leave", envelope{ForceLeave: name},
		func(env envelope) *leaderReply { return env.ForceLeaveReply })
}

// askLeader sends leader, over the peer transport, a request only the
// leader carries out (what names it in errors), and turns the leaderReply
// that reply picks out of the answer into the socket's errors.
func (a *Agent) askLeader(ctx context.Context, leader bully.Node, what string, req envelope, reply func(envelope) *leaderReply) error {
	env, addr, err := a.call(ctx, leader, req)
	switch {
	case errors.Is(err, errNoPeerAddr):
		return fmt.Errorf("%w: no address for leader %s", rpc.ErrNoLeader, leader.Name)
	case errors.Is(err, errBadReply):
		return fmt.Errorf("agent: %s via leader %s: %w", what, leader.Name, err)
	case err != nil:
		// Not the agent's failure but the cluster's state of the moment:
		// the caller is told, as for a leader not known, and can retry.
		// A request that reached the leader after the call gave up was
		// not carried out (the peer transport refuses it); one that came
		// in time and lost its answer may have been.
		return fmt.Errorf("%w: the leader this node knows, %s (%s), did not answer the %s: %v; if it arrived in time it may have been carried out (`tenure status` and `members` show); retry, or ask on another node",
			rpc.ErrNoLeader, leader.Name, addr, what, err)
	}
	r := reply(env)
	if r == nil {
		return fmt.Errorf("agent: %s via leader %s: no answer to the %s (is its agent older than this one?)", what, leader.Name, what)
	}
	switch r.Code {
	case "":
		return nil
	case "not_found":
		return fmt.Errorf("%w: %s (as leader %s sees it)", rpc.ErrNotFound, r.Error, leader.Name)
	case "not_leader":
		return fmt.Errorf("%w: %s no longer leads; try again", rpc.ErrNoLeader, leader.Name)
	default: // "self", "not_eligible": the request names a member it may not
		return fmt.Errorf("%w: %s (as leader %s sees it)", rpc.ErrInvalidArgument, r.Error, leader.Name)
	}
}

func (b backend) Keys(ctx context.Context, req rpc.KeysRequest) (rpc.KeyringInfo, error) {
	return b.a.Keys(ctx, req)
}

// Keys runs a cluster key action on every member through gossip's key
// manager; the peer transport follows the keyring (followKeyring). Errors
// wrap rpc.ErrInvalidArgument (a key that is not a base64 key of 16, 24 or
// 32 bytes, or an agent without a cluster key), rpc.ErrShuttingDown, or
// rpc.ErrInternal when members failed or did not answer (the message names
// them).
func (a *Agent) Keys(ctx context.Context, req rpc.KeysRequest) (rpc.KeyringInfo, error) {
	var key []byte
	if req.Action != rpc.KeysList {
		k, err := base64.StdEncoding.DecodeString(req.Key)
		if err != nil {
			return rpc.KeyringInfo{}, fmt.Errorf("%w: key is not base64: %v", rpc.ErrInvalidArgument, err)
		}
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return rpc.KeyringInfo{}, fmt.Errorf("%w: the key is %d bytes, want 16, 24 or 32", rpc.ErrInvalidArgument, n)
		}
		key = k
	}
	var st gossip.KeyringStatus
	var err error
	switch req.Action {
	case rpc.KeysList:
		st, err = a.members.ListKeys(ctx)
	case rpc.KeysInstall:
		st, err = a.members.InstallKey(ctx, key)
	case rpc.KeysUse:
		st, err = a.members.UseKey(ctx, key)
	default:
		st, err = a.members.RemoveKey(ctx, key)
	}
	info := rpc.KeyringInfo{Keys: st.Keys, PrimaryKeys: st.PrimaryKeys, NumNodes: st.NumNodes,
		NumResp: st.NumResp, NumErr: st.NumErr, Messages: st.Messages}
	switch {
	case err == nil:
		return info, nil
	case errors.Is(err, gossip.ErrNoKeyring):
		return info, fmt.Errorf("%w: %v", rpc.ErrInvalidArgument, err)
	case errors.Is(err, gossip.ErrShutdown):
		return info, fmt.Errorf("%w: %v", rpc.ErrShuttingDown, err)
	case ctx.Err() != nil:
		return info, err
	}
	return info, fmt.Errorf("%w: %v", rpc.ErrInternal, err)
}

func (b backend) Lock(ctx context.Context, req rpc.LockRequest) (rpc.LockSession, error) {
	return b.a.Lock(ctx, req)
}

func (b backend) Locks(ctx context.Context) ([]rpc.LockInfo, error) { return b.a.Locks(ctx) }
