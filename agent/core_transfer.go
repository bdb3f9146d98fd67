package agent

import (
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/bully"
)

// How a term ends on an operator's request: a resign with a hold, a
// transfer to a named node, or a drain (the node stops being eligible).
// Each goes through the machine (bully.Machine.ResignWith, SetEligible),
// whose release the core defers until the local work of the term has
// stopped (core.release), with the term's RESIGN held back with it: the
// successor named in that RESIGN campaigns only once the voters no longer
// promise this node. None of them changes a lease rule: a transfer only
// changes who campaigns first.

// Errors of transfer.
var (
	errTransferUnknown    = errors.New("agent: transfer: no such live member")
	errTransferIneligible = errors.New("agent: transfer: the member may not lead (it runs with --eligible=false, is drained, or cannot write its data dir)")
	errTransferSilent     = errors.New("agent: transfer: the member cannot take the term now")
)

// transferWindow is how long the others leave the election to a named
// successor: its lease round, with one retry, and a margin for its
// COORDINATOR to arrive. An explicit Election.TransferWindow wins.
func transferWindow(cfg coreConfig) time.Duration {
	if cfg.Election.TransferWindow > 0 {
		return cfg.Election.TransferWindow
	}
	w := cfg.Election.ElectionTimeout
	if cfg.Consistency == Quorum {
		w += 2 * cfg.Lease.AcquireBudget
	}
	return w
}

// resignFor makes a leader step down and stay out of elections for hold
// (the election's resign hold when zero); bully.ErrNotLeader otherwise.
func (c *core) resignFor(now time.Time, hold time.Duration) error {
	err := c.m.ResignWith(now, bully.Handover{Hold: hold, Natural: true})
	c.process(now)
	return err
}

// transferable checks that this node leads and that name is a live
// eligible member it may hand its term to, and returns that member. It
// returns the leader to ask instead when this node does not lead (zero
// when none is known), and a zero successor when name is this node.
func (c *core) transferable(now time.Time, name string) (leader, to bully.Node, err error) {
	if !c.leaseValid(now) {
		return c.m.Status().Leader, bully.Node{}, fmt.Errorf("agent: transfer: %w", errNotLeaderHere)
	}
	if name == c.cfg.Self.Name {
		return bully.Node{}, bully.Node{}, nil
	}
	mv, ok := c.live[name]
	switch {
	case !ok:
		return bully.Node{}, bully.Node{}, fmt.Errorf("%w: %q", errTransferUnknown, name)
	case !mv.Eligible:
		return bully.Node{}, bully.Node{}, fmt.Errorf("%w: %q", errTransferIneligible, name)
	}
	return bully.Node{}, mv.Node, nil
}

// transfer hands this leader's term to the live eligible member name. It
// returns the leader to ask instead when this node does not lead (zero
// when none is known). Asked to hand over to itself, it does nothing. The
// agent first makes sure name answers (Agent.transferHere); the core
// alone, as the simulations drive it, does not.
func (c *core) transfer(now time.Time, name string) (bully.Node, error) {
	leader, to, err := c.transferable(now, name)
	if err != nil || to.IsZero() {
		return leader, err
	}
	epoch := c.lease.epoch
	if err := c.m.ResignWith(now, bully.Handover{Successor: to}); err != nil {
		return bully.Node{}, fmt.Errorf("agent: transfer: %w", err)
	}
	c.log.Info("handing the term over", "to", name, "epoch", epoch)
	c.process(now)
	return bully.Node{}, nil
}

// transferReply answers a transfer forwarded by another node
// ("not_eligible": the named member may not lead, or did not answer).
type transferReply = leaderReply

// transferReplyFor is the reply to a forwarded transfer that ended with
// err.
func transferReplyFor(err error) *transferReply {
	switch {
	case err == nil:
		return &transferReply{}
	case errors.Is(err, errNotLeaderHere):
		return &transferReply{Code: "not_leader", Error: err.Error()}
	case errors.Is(err, errTransferUnknown):
		return &transferReply{Code: "not_found", Error: err.Error()}
	default:
		return &transferReply{Code: "not_eligible", Error: err.Error()}
	}
}

// canTakeReply answers a CanTake: Refused is empty when the node can take
// a term now, else why it cannot.
type canTakeReply struct {
	Refused string `msgpack:"refused,omitempty"`
}

// canTake answers a leader about to name this node its successor: whether
// it could take the term now. It cannot when it may not lead (configured
// so, or drained), when it has no roster yet, or when its data dir cannot
// be written: a failure known already, or one of the probe it writes now
// (a node learns that its disk filled only at a write, and an observer
// writes nothing until it campaigns). Named all the same, such a node
// would leave the cluster without a leader for the transfer window
// (takeOver does nothing), and then the election would pick a node the
// operator did not ask for. A failed probe marks the data dir failed as
// any failed write does, so gossip says it too. Whether it reaches a
// majority of the voters the agent asks them before it answers yes
// (canTakeCheck, Agent.serveCanTake).
func (c *core) canTake(now time.Time) *canTakeReply {
	if !c.cfg.Eligible {
		return &canTakeReply{Refused: "it may not lead (it runs with --eligible=false, or is drained)"}
	}
	if c.quorumMode() && c.roster().IsZero() {
		return &canTakeReply{Refused: "it has not learned the voter roster yet"}
	}
	if c.disk.err == nil && c.disk.probe != nil {
		if err := c.disk.probe(); err != nil {
			c.storageFailed(now, fmt.Errorf("probe the data dir: %w", err))
		}
	}
	if c.disk.err != nil {
		return &canTakeReply{Refused: fmt.Sprintf("it cannot write its data dir: %v", c.disk.err)}
	}
	return &canTakeReply{}
}

// canTakeCheck is the check of the voters that a node asked whether it can
// take the term runs before it answers yes, and how long it may take: half
// a peer wait, so that the answer reaches a leader that waits a peer wait
// of its own (or half what the leader says it waits, if shorter:
// Agent.serveCanTake). ok is false when the node runs without a quorum. A node that
// does not outrank the leader does not probe its reach (wantsProbe), so
// its last verdict is old or missing; and a proof young enough to claim
// with (mayClaim, up to two announce intervals and a budget old) is not
// enough either: in the transfer-cut scenario the named node had reached
// the voters a second before the cut. Named successor while cut off from
// the voters, a node cannot win the term, and before, the cluster had no
// leader for the transfer window (660-683 ms in that scenario) and then
// the election picked a node the operator had not named. The check costs
// a round trip to the voters per hand-over.
func (c *core) canTakeCheck(now time.Time) (rc reachCheck, wait time.Duration, ok bool) {
	if !c.quorumMode() {
		return reachCheck{}, 0, false
	}
	return c.reachCheck(), c.peerWait(now) / 2, true
}

// setEligible makes this node eligible to lead or not (a drain, or its
// end; the agent passes its configured eligibility and-ed with not
// drained). A leader made ineligible steps down through the deferred
// release; cfg.Eligible follows, so that an ineligible node stops probing
// its reach of the voters and an eligible one starts again. The election
// counts the node eligible only while its data dir can be written
// (core_storage.go).
func (c *core) setEligible(now time.Time, eligible bool) {
	c.cfg.Eligible = eligible
	c.m.SetEligible(now, eligible && c.disk.err == nil)
	c.process(now)
}

// naturalSuccessor is the node a resign (or drain) of this leader would
// name now: zero when it does not lead, or no other node could take the
// term.
func (c *core) naturalSuccessor(now time.Time) bully.Node { return c.m.NaturalSuccessor(now) }

// passOver leaves n, which did not answer this node, out of the natural
// successors it names and of its elections, as a node silent to an
// ELECTION is (bully.Machine.PassOver).
func (c *core) passOver(now time.Time, n bully.Node) { c.m.PassOver(now, n) }
