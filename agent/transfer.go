package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/gossip"
	"github.com/tenurehq/tenure/leasing"
	"github.com/tenurehq/tenure/rpc"
)

// Transfer makes the leader hand its term to the member name: this node
// does it when it leads, else it forwards the request to the leader it
// knows, as ForceLeave does. The leader first asks name over the peer
// transport whether it can take the term (askCanTake), and keeps its term
// if name does not answer within a peer round trip (frozen, killed, or
// cut off from it) or answers that it cannot (it may not lead, or its
// data dir cannot be written): such a successor cannot take the term, and
// the cluster would spend the transfer window, then move leadership to a
// node the operator did not ask for. Then it resigns as for Resign (its local
// work stops before the lease is released) and names name as successor
// in its RESIGN; name takes over at once, and nodes that outrank it do
// not preempt that term. Success means the leader resigned and handed
// over; name leads within a few round trips, unless it fails to take the
// lease within the transfer window (cut off from the voters, or stopped
// since it answered), and then the normal election picks the leader.
// Asked to transfer to the leader itself, it does nothing. Errors wrap
// rpc.ErrNotFound (no such member, or not alive), rpc.ErrInvalidArgument
// (it may not lead, or did not answer the leader, or cannot take the term)
// or rpc.ErrNoLeader.
func (a *Agent) Transfer(ctx context.Context, name string) error {
	if err := a.checkSuccessor(name); err != nil {
		return err
	}
	leader, err := a.transferHere(ctx, name)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errTransferUnknown):
		return fmt.Errorf("%w: %v", rpc.ErrNotFound, err)
	case errors.Is(err, errTransferIneligible), errors.Is(err, errTransferSilent):
		return fmt.Errorf("%w: %v", rpc.ErrInvalidArgument, err)
	case errors.Is(err, errStopped) || ctx.Err() != nil:
		return err
	case !errors.Is(err, errNotLeaderHere) || leader.IsZero() || leader == a.self():
		return fmt.Errorf("%w: cannot transfer to %q now: %v", rpc.ErrNoLeader, name, err)
	}
	return a.forwardTransfer(ctx, leader, name)
}

// transferHere hands this node's term to name if it leads and name
// answers it; else it returns the leader to ask instead (with an error
// wrapping errNotLeaderHere), or why not.
func (a *Agent) transferHere(ctx context.Context, name string) (bully.Node, error) {
	var leader, to bully.Node
	var wait time.Duration
	var err error
	if derr := a.do(ctx, func() {
		now := a.cfg.Clock.Now()
		leader, to, err = a.core.transferable(now, name)
		wait = a.core.peerWait(now)
	}); derr != nil {
		return bully.Node{}, derr
	}
	if err != nil || to.IsZero() {
		return leader, err
	}
	var refused *cannotTake
	switch err := a.askCanTake(ctx, to, wait); {
	case errors.As(err, &refused):
		return bully.Node{}, fmt.Errorf("%w: %q answered that %v; the leader keeps the term", errTransferSilent, name, err)
	case err != nil:
		return bully.Node{}, fmt.Errorf("%w: %q did not answer the leader within %v (%v); the leader keeps the term", errTransferSilent, name, wait, err)
	}
	if derr := a.do(ctx, func() {
		leader, err = a.core.transfer(a.cfg.Clock.Now(), name)
		a.flush()
	}); derr != nil {
		return bully.Node{}, derr
	}
	return leader, err
}

// maxPassOver bounds how many natural successors a leader passes over
// before it resigns (askSuccessor): each costs a peer wait.
const maxPassOver = 2

// askSuccessor runs before a leader resigns, for Resign, Drain and a
// graceful stop: it asks the node the RESIGN would name as natural
// successor whether it can take the term (askCanTake, bounded by the peer
// wait), and has the core pass over one that does not answer (frozen,
// killed, or cut off from this node while gossip lists it alive) or
// cannot (its data dir cannot be written), up to maxPassOver nodes.
// The RESIGN then names a node that answered, or one not asked, and takes
// over at once; before, a frozen natural successor left the cluster
// without a leader for the transfer window and then an election that
// waited for it as well. On a node that does not lead it does nothing;
// it returns an error only when ctx ends or the agent stops.
func (a *Agent) askSuccessor(ctx context.Context) error {
	for range maxPassOver {
		var s bully.Node
		var wait time.Duration
		if err := a.do(ctx, func() {
			now := a.cfg.Clock.Now()
			s, wait = a.core.naturalSuccessor(now), a.core.peerWait(now)
		}); err != nil || s.IsZero() {
			return err
		}
		err := a.askCanTake(ctx, s, wait)
		var refused *cannotTake
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("agent: ask the natural successor %s: %w", s.Name, ctx.Err())
		case errors.As(err, &refused):
			a.log.Warn("the natural successor cannot take the term; resigning past it",
				"successor", s.Name, "err", err)
		default:
			a.log.Warn("the natural successor did not answer; resigning past it",
				"successor", s.Name, "wait", wait, "err", err)
		}
		a.counts.add("resign.passed_over")
		if err := a.do(ctx, func() { a.core.passOver(a.cfg.Clock.Now(), s) }); err != nil {
			return err
		}
	}
	return nil
}

// cannotTake is the answer of a node a leader was about to name
// successor that cannot take the term now: why, as it said.
type cannotTake struct{ why string }

func (e *cannotTake) Error() string { return e.why }

// askCanTake asks n, which this leader is about to name successor,
// whether it can take the term now (core.canTake), and waits at most wait
// for the answer. An agent that answers has a running driver (a frozen or
// killed one does not); one that answers no gives its reason, as a
// *cannotTake error. An agent of an older release answers with an
// empty envelope: yes.
func (a *Agent) askCanTake(ctx context.Context, n bully.Node, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	rep, _, err := a.call(ctx, n, envelope{CanTake: true, CanTakeWithin: wait})
	if err != nil {
		return err
	}
	if r := rep.CanTakeReply; r != nil && r.Refused != "" {
		return &cannotTake{why: r.Refused}
	}
	return nil
}

// askPreempt asks n, the higher node this leader's election would yield
// its term to, whether it can take the term (askCanTake, off the driver,
// within wait), and gives the answer to the core (core_preempt.go).
func (a *Agent) askPreempt(n bully.Node, wait time.Duration) {
	a.askThen(func() error {
		err := a.askCanTake(a.ctx, n, wait)
		if err != nil {
			a.counts.add("preempt.refused")
		}
		return err
	}, func(now time.Time, err error) { a.core.preemptAnswered(now, n, err) })
}

// stepDownForDisk makes this leader, whose data dir cannot be written,
// step down once it has asked its natural successor (askSuccessor, off
// the driver), as a drained leader does (core.takeDiskStepDown).
func (a *Agent) stepDownForDisk() {
	a.askThen(func() error { return a.askSuccessor(a.ctx) }, func(now time.Time, err error) {
		if err == nil { // else the agent stops
			a.core.stepDownForDisk(now)
		}
	})
}

// askThen runs ask off the driver, counted in sends so that a stop waits
// for it, and then then on the driver with ask's error, and flushes. An
// agent that stops meanwhile runs nothing more.
func (a *Agent) askThen(ask func() error, then func(now time.Time, err error)) {
	a.sends.Add(1)
	go func() {
		defer a.sends.Done()
		err := ask()
		_ = a.do(a.ctx, func() { // an error: the agent stops
			then(a.cfg.Clock.Now(), err)
			a.flush()
		})
	}()
}

// serveCanTake answers a leader about to name this node its successor
// (handlePeer calls it off the driver): the core's answer (core.canTake),
// and when that is yes and the core wants the voters checked
// (core.canTakeCheck), whether this node reaches a majority of them
// (checkReach), within half of what the leader waits for the answer
// (within; zero: not said) where that is shorter than the core's wait.
// The error is for an agent that stopped or a request whose context
// ended.
func (a *Agent) serveCanTake(ctx context.Context, within time.Duration) (*canTakeReply, error) {
	var rep *canTakeReply
	var rc reachCheck
	var wait time.Duration
	var check bool
	if err := a.do(ctx, func() {
		now := a.cfg.Clock.Now()
		rep = a.core.canTake(now)
		rc, wait, check = a.core.canTakeCheck(now)
		a.flush()
	}); err != nil {
		return nil, err
	}
	if rep.Refused != "" || !check {
		return rep, nil
	}
	if within > 0 {
		wait = min(wait, within/2)
	}
	silent, err := a.checkReach(ctx, rc, wait)
	if err != nil || len(silent) == 0 {
		return rep, err
	}
	var why string
	if err := a.do(ctx, func() { why = a.core.describeSilent(a.cfg.Clock.Now(), silent, len(rc.roster.Members())) }); err != nil {
		return nil, err
	}
	a.counts.add("can_take.cut_off")
	a.log.Warn("a leader would name this node its successor, but it cannot reach a majority of the voters", "why", why, "wait", wait)
	return &canTakeReply{Refused: fmt.Sprintf("it cannot reach a majority of the voters: %s (within %v)", why, wait)}, nil
}

// checkReach asks the other voters of rc's roster for their floors (a
// FloorQuery, as the reach probe does; the answers go to the core as the
// probe's do) and waits until those that answered make a majority with
// this node, or wait ends. It returns the voters that had not answered by
// then, none when a majority did. The error is for a request whose
// context ended.
func (a *Agent) checkReach(ctx context.Context, rc reachCheck, wait time.Duration) ([]leasing.Node, error) {
	others := rc.others()
	askCtx, cancel := context.WithTimeout(ctx, wait)
	answers := make(chan string, len(others)) // a voter that answered; "" for one that did not
	var asked sync.WaitGroup
	defer asked.Wait()
	defer cancel() // the questions still out end before checkReach returns
	for _, v := range others {
		asked.Go(func() {
			if a.askFloor(askCtx, toBully(v)) {
				answers <- v.Name
			} else {
				answers <- ""
			}
		})
	}
	answered := map[string]bool{}
	for range others {
		if rc.reached(answered) {
			break
		}
		if name := <-answers; name != "" {
			answered[name] = true
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if rc.reached(answered) {
		return nil, nil
	}
	var silent []leasing.Node
	for _, v := range others {
		if !answered[v.Name] {
			silent = append(silent, v)
		}
	}
	return silent, nil
}

// askFloor sends n a FloorQuery and hands the answer to the core; it
// reports whether n answered before ctx ended.
func (a *Agent) askFloor(ctx context.Context, n bully.Node) bool {
	addr, ok := a.peerAddr(n)
	if !ok {
		_ = a.do(ctx, func() { a.core.sendFailed(a.cfg.Clock.Now(), n, errNoPeerAddr) })
		return false
	}
	req := envelope{FloorQuery: true}
	body, err := encodeEnvelope(req)
	if err != nil {
		a.log.Error("encode peer message", "err", err)
		return false
	}
	kind := req.kind()
	a.countSent(kind, body)
	env, ok := a.exchange(ctx, n, addr, body, kind)
	return ok && env.Floor != nil
}

// serveTransfer answers a transfer forwarded by another node, as
// Transfer does on the leader (handlePeer calls it for the core: it asks
// the successor first, which the driver must not wait for). The error is
// for an agent that stopped or a request whose context ended.
func (a *Agent) serveTransfer(ctx context.Context, name string) (*transferReply, error) {
	_, err := a.transferHere(ctx, name)
	if errors.Is(err, errStopped) || (ctx.Err() != nil && errors.Is(err, ctx.Err())) {
		return nil, err
	}
	return transferReplyFor(err), nil
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
		case m.Tags[storageTag] == "1":
			return fmt.Errorf("%w: transfer: member %q cannot write its data dir and may not lead until it can (its tenure status says why)", rpc.ErrInvalidArgument, name)
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
