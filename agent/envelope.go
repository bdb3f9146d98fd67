package agent

import (
	"fmt"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/internal/wire"
	"github.com/tenurehq/tenure/leasing"
	"github.com/tenurehq/tenure/leasing/named"
)

// peerVersion is the version of the peer message envelope.
const peerVersion = 1

// envelope is what travels on the peer transport, in both directions. Exactly
// one field is set: a request, or the reply to one; only a RESIGN may carry
// its sender's release along (Released).
type envelope struct {
	Version uint8          `msgpack:"v"`
	Bully   *bully.Message `msgpack:"bully,omitempty"`
	// Released, on a RESIGN, is the sender's release of the term it
	// resigns, sent once the term's local work has stopped, as its release
	// to the voters is (core.sendRelease): the receiver applies it to its
	// own vote and relays it with its acquires (core.relayFor).
	Released   *leasing.Released `msgpack:"released,omitempty"`
	Lease      *leasing.Request  `msgpack:"lease,omitempty"`
	LeaseReply *leasing.Reply    `msgpack:"lease_reply,omitempty"`
	// RosterFetch asks for the receiver's roster; Roster carries one, and
	// Follows the leader the sender follows, if it knows one.
	RosterFetch bool            `msgpack:"roster_fetch,omitempty"`
	Roster      *leasing.Roster `msgpack:"roster,omitempty"`
	Follows     *followed       `msgpack:"follows,omitempty"`
	// RosterUpdate is a leader's roster change step; RosterAck the answer.
	RosterUpdate *rosterUpdate `msgpack:"roster_update,omitempty"`
	RosterAck    *rosterAck    `msgpack:"roster_ack,omitempty"`
	// FloorQuery asks a voter for the highest epoch it has granted; Floor
	// answers (see core.amnesia).
	FloorQuery bool        `msgpack:"floor_query,omitempty"`
	Floor      *floorReply `msgpack:"floor,omitempty"`
	// Pledge asks a fresh voter to pledge to bootstrap this roster;
	// PledgeReply answers (see bootstrap).
	Pledge      *leasing.Roster `msgpack:"pledge,omitempty"`
	PledgeReply *pledgeReply    `msgpack:"pledge_reply,omitempty"`
	// ForceLeave asks the leader to remove a voter; ForceLeaveReply answers.
	ForceLeave      string           `msgpack:"force_leave,omitempty"`
	ForceLeaveReply *forceLeaveReply `msgpack:"force_leave_reply,omitempty"`
	// Transfer asks the leader to hand its term to the named member;
	// TransferReply answers (see core.transfer).
	Transfer      string         `msgpack:"transfer,omitempty"`
	TransferReply *transferReply `msgpack:"transfer_reply,omitempty"`
	// CanTake asks the node a leader is about to name successor (of a
	// transfer, a resign's natural one, or a higher node it would yield
	// to by preemption) whether it can take the term now; CanTakeReply
	// answers (core.canTake). An agent of an older
	// release answers with an empty envelope, which reads as yes.
	CanTake      bool          `msgpack:"can_take,omitempty"`
	CanTakeReply *canTakeReply `msgpack:"can_take_reply,omitempty"`
	// CanTakeWithin, with CanTake, is how long the leader waits for the
	// answer, so that the node's check of the voters ends in time
	// (Agent.serveCanTake); zero from an agent of an older release.
	CanTakeWithin time.Duration `msgpack:"can_take_within,omitempty"`
	// Named is a request of a named-lease holder to the leader;
	// NamedReply its answer, or a grant the leader pushes to a waiter.
	Named      *named.Request `msgpack:"named,omitempty"`
	NamedReply *named.Reply   `msgpack:"named_reply,omitempty"`
	// NamedList asks the leader for its named-lease table; NamedListReply
	// answers.
	NamedList      bool            `msgpack:"named_list,omitempty"`
	NamedListReply *namedListReply `msgpack:"named_list_reply,omitempty"`
	// WokeMS, on an answer, says that its sender woke from a freeze of
	// its own (its ticks had stopped, core.ownFreeze) shortly before it
	// answered: how long before, in milliseconds, plus one; zero when it
	// did not within wakeHorizon, or from an agent of an older release.
	// The caller's call then waited on the freeze, and its time is no
	// round trip (core.stampWake, envelope.frozeWithin).
	WokeMS uint32 `msgpack:"woke_ms,omitempty"`
}

// bare reports whether e carries nothing but its version and wake stamp:
// the empty answer that only says a message arrived.
func (e envelope) bare() bool {
	e.Version, e.WokeMS = 0, 0
	return e == envelope{}
}

// frozeWithin reports whether e, an answer to a call that took `took`,
// says its sender woke from a freeze of its own after the call began:
// the answer waited on that freeze.
func (e envelope) frozeWithin(took time.Duration) bool {
	return e.WokeMS != 0 && time.Duration(e.WokeMS-1)*time.Millisecond < took
}

// namedListReply answers a NamedList: the leader's table, or why not
// (Code as leaderReply's).
type namedListReply struct {
	leaderReply
	Names []named.Info `msgpack:"names"`
}

// followed is the leader a member follows and its term, relayed with the
// roster to a node that fetches it (bully.Machine.Relayed).
type followed struct {
	Leader bully.Node `msgpack:"leader"`
	Term   uint64     `msgpack:"term"`
}

// rosterUpdate carries a roster change step from the leader of term Term.
type rosterUpdate struct {
	From   bully.Node     `msgpack:"from"`
	Term   uint64         `msgpack:"term"`
	Roster leasing.Roster `msgpack:"roster"`
}

// rosterAck answers a rosterUpdate.
type rosterAck struct {
	From    bully.Node `msgpack:"from"`
	Version uint64     `msgpack:"version"`
	Epoch   uint64     `msgpack:"epoch"`
	OK      bool       `msgpack:"ok"`
	Reason  string     `msgpack:"reason,omitempty"`
}

// floorReply answers a FloorQuery: the highest epoch granted, and whether
// this node would refuse to grant now (restart hold, unknown floor, or no
// vote at all), which decides whether the leader may promote it.
type floorReply struct {
	From    bully.Node `msgpack:"from"`
	Granted uint64     `msgpack:"granted"`
	Holding bool       `msgpack:"holding,omitempty"`
	// Floor is the epoch a new term must exceed at this voter: Granted,
	// or higher where a release named a later failed round (its released
	// floor, leasing.Voter.Floor). Zero from a node with no vote, or from
	// an older release, which sent Granted alone.
	Floor uint64 `msgpack:"floor,omitempty"`
	// Promise is the voter's promise, for the natural successor's lease
	// watch (core_watch.go); nil from a node with no vote to give.
	Promise *promiseView `msgpack:"promise,omitempty"`
}

// leaderReply answers a request only the leader carries out (ForceLeave,
// Transfer): Code is "" on success, else "not_leader", "not_found", or
// another code for a request the leader refuses ("self", "not_eligible"),
// with a message in Error.
type leaderReply struct {
	Code  string `msgpack:"code,omitempty"`
	Error string `msgpack:"error,omitempty"`
}

// forceLeaveReply answers a ForceLeave ("self": the leader cannot remove
// itself).
type forceLeaveReply = leaderReply

// decodeEnvelope decodes and checks a peer envelope.
func decodeEnvelope(b []byte) (envelope, error) {
	var env envelope
	if err := wire.Unmarshal(b, &env); err != nil {
		return env, fmt.Errorf("agent: peer message: %w", err)
	}
	if env.Version != peerVersion {
		return env, fmt.Errorf("agent: peer message version %d, want %d", env.Version, peerVersion)
	}
	if m := env.Bully; m != nil && (m.Type < bully.MsgElection || m.Type > bully.MsgInfo || m.From.Name == "") {
		return env, fmt.Errorf("agent: malformed election message %v", *m)
	}
	if f := env.Follows; f != nil && (f.Leader.Name == "" || f.Term == 0) {
		return env, fmt.Errorf("agent: malformed relayed leader %+v", *f)
	}
	if r := env.Lease; r != nil && (r.Kind < leasing.Acquire || r.Kind > leasing.Release || r.Candidate.Name == "" ||
		r.Relayed != nil && (r.Kind != leasing.Acquire || !r.Relayed.Valid())) {
		return env, fmt.Errorf("agent: malformed lease request %+v", *r)
	}
	if r := env.Released; r != nil && (!r.Valid() || env.Bully == nil || env.Bully.Type != bully.MsgResign) {
		return env, fmt.Errorf("agent: malformed release %+v", *r)
	}
	if r := env.Named; r != nil && (r.Op < named.OpAcquire || r.Op > named.OpRelease || r.Holder.Node.Name == "") {
		return env, fmt.Errorf("agent: malformed named-lease request %+v", *r)
	}
	return env, nil
}

func encodeEnvelope(env envelope) ([]byte, error) {
	env.Version = peerVersion
	return wire.Marshal(env)
}

func toLeasing(n bully.Node) leasing.Node { return leasing.Node{ID: n.ID, Name: n.Name} }

func toBully(n leasing.Node) bully.Node { return bully.Node{ID: n.ID, Name: n.Name} }
