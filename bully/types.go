package bully

import (
	"errors"
	"fmt"
	"time"
)

// Node identifies a cluster member. Nodes are ranked by (ID, Name): the
// highest eligible live node should lead.
type Node struct {
	ID   uint64 `msgpack:"id"`
	Name string `msgpack:"name"`
}

// Less reports whether n ranks below o.
func (n Node) Less(o Node) bool {
	if n.ID != o.ID {
		return n.ID < o.ID
	}
	return n.Name < o.Name
}

// IsZero reports whether n is the zero Node (no node).
func (n Node) IsZero() bool { return n == Node{} }

// String formats n as name(id).
func (n Node) String() string { return fmt.Sprintf("%s(%d)", n.Name, n.ID) }

// Member is a live member as the election sees it.
type Member struct {
	Node
	// Eligible members may lead; the others only follow.
	Eligible bool
}

// MsgType is the kind of a peer message.
type MsgType uint8

// The message types of the bully exchange.
const (
	// MsgElection asks a higher-ranked node whether it is alive.
	MsgElection MsgType = iota + 1
	// MsgAnswer is the reply to MsgElection: "I am alive, leave it to me". It
	// carries the leader the sender follows, if any.
	MsgAnswer
	// MsgCoordinator announces the sender as leader of term Term.
	MsgCoordinator
	// MsgResign announces that the sender stopped leading term Term. With
	// Hold set the sender will neither campaign nor answer for a while, so
	// receivers leave it out of their election. With Successor set the
	// sender hands its term over: the successor campaigns at once and the
	// others leave the election to it for the transfer window.
	MsgResign
	// MsgInfo tells a leader of a later term than the one it offered: the
	// sender last followed Leader in Term. A leader that learns of another
	// leader's term at least as high as its own yields to it or starts a new
	// term above it, so every node sees terms only grow. Naming the
	// receiver's own term, it is a follower's question whether that term
	// goes on (it has not heard it announced for a while): a leader still
	// leading it answers with its COORDINATOR.
	MsgInfo
)

var msgTypeNames = map[MsgType]string{
	MsgElection:    "ELECTION",
	MsgAnswer:      "ANSWER",
	MsgCoordinator: "COORDINATOR",
	MsgResign:      "RESIGN",
	MsgInfo:        "INFO",
}

// String returns the protocol name of t.
func (t MsgType) String() string {
	if s, ok := msgTypeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("MsgType(%d)", uint8(t))
}

// Message is one bully protocol message between two nodes.
type Message struct {
	Type MsgType `msgpack:"type"`
	From Node    `msgpack:"from"`
	To   Node    `msgpack:"to"`
	// Epoch is the highest epoch the sender knows of.
	Epoch uint64 `msgpack:"epoch"`
	// Leader and Term name a term: the leader the sender follows (MsgAnswer),
	// announces (MsgCoordinator, where Leader is the sender), ends
	// (MsgResign) or last followed (MsgInfo). Leader is zero when the sender
	// knows none.
	Leader Node   `msgpack:"leader"`
	Term   uint64 `msgpack:"term"`
	// Hold marks a MsgResign after which the sender stays out of elections.
	Hold bool `msgpack:"hold,omitempty"`
	// HoldFor, on a MsgResign with Hold, is how long the sender stays out;
	// zero means the receiver's Config.ResignHold.
	HoldFor time.Duration `msgpack:"hold_for,omitempty"`
	// Successor, on a MsgResign, names the node the sender hands its term
	// to (see Handover); zero when the election decides.
	Successor Node `msgpack:"successor,omitempty"`
	// Natural, on a MsgResign with a Successor, says the successor is the
	// node the election would pick anyway (Handover.Natural): it takes
	// over at once, but its term is not Chosen, so a higher node that
	// comes back may preempt it as usual.
	Natural bool `msgpack:"natural,omitempty"`
	// Chosen marks a MsgCoordinator of a term that was handed to its
	// leader by name: nodes ranked above it do not claim that term.
	Chosen bool `msgpack:"chosen,omitempty"`
}

// String formats m for logs and test failures.
func (m Message) String() string {
	s := fmt.Sprintf("%s %s->%s epoch=%d", m.Type, m.From.Name, m.To.Name, m.Epoch)
	if !m.Leader.IsZero() {
		s += fmt.Sprintf(" leader=%s term=%d", m.Leader.Name, m.Term)
	}
	if !m.Successor.IsZero() {
		s += " successor=" + m.Successor.Name
	}
	if m.Chosen {
		s += " chosen"
	}
	return s
}

// State is a Machine's role in the election.
type State int

// The states of a Machine.
const (
	// StateFollower: not campaigning; following the known leader, or waiting
	// for the campaign timer when there is none.
	StateFollower State = iota
	// StateElecting: ELECTION sent to every higher eligible node; waiting for
	// an ANSWER until the election timeout.
	StateElecting
	// StateWaiting: a higher node answered; waiting for its COORDINATOR.
	StateWaiting
	// StateAcquiring: the election is won; waiting for the lease round.
	StateAcquiring
	// StateLeader: leading the current term.
	StateLeader
)

var stateNames = [...]string{"follower", "electing", "waiting", "acquiring", "leader"}

// String returns the lower-case name of s.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Campaigning reports whether s is one of the states of an election in
// progress.
func (s State) Campaigning() bool {
	return s == StateElecting || s == StateWaiting || s == StateAcquiring
}

// ErrNotLeader is returned by Resign when the node does not lead.
var ErrNotLeader = errors.New("bully: not leader")

// Status is a snapshot of a Machine's view.
type Status struct {
	State State
	// Leader is the leader this node knows of, zero when none.
	Leader Node
	// Term is the epoch of Leader's term (0 when none).
	Term uint64
	// Epoch is the highest epoch this node has seen or used.
	Epoch uint64
	// Lost says, while no leader is known, which leader this node last
	// knew and why it forgot it ("n5: gossip reports it failed"); empty
	// when it never knew one.
	Lost string
}

// Ready is what a Machine asks its driver to do. The driver must persist
// Epoch (when it is higher than what is stored) before it sends Messages or
// runs the lease round, so that no epoch is ever used twice across restarts.
type Ready struct {
	// Messages to send, each to its To node. Lost messages are tolerated.
	Messages []Message
	// Acquire, when non-zero, asks the driver to run the lease round for
	// that epoch and then call Acquired or AcquireFailed.
	Acquire uint64
	// Release, when non-zero, asks the driver to release the lease of that
	// epoch, so the next leader need not wait for it to expire.
	Release uint64
	// Why says, with Release, why the term ended (for the driver's log):
	// resigned, preempted by a higher node, yielding to another leader,
	// the lease ran out.
	Why string
	// Epoch is the highest epoch seen or used so far.
	Epoch uint64
	// RefusedEpoch, when non-zero, is the highest epoch or term named by a
	// peer message that was dropped for jumping more than MaxEpochJump
	// above Epoch (from RefusedFrom). The driver should report it: it is a
	// forged message or a node far out of date.
	RefusedEpoch uint64
	RefusedFrom  Node
	// Exhausted reports that this node cannot start a term: its epoch is
	// the largest there is.
	Exhausted bool
	// Preempt, when non-zero, is the higher node this leader would yield
	// its term to (Config.ConfirmPreempt): the driver asks that node
	// whether it can take the term now and reports the answer with
	// PreemptAnswered. The leader keeps its term meanwhile.
	Preempt Node
}
