package named

import (
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/leasing"
)

// Op is the kind of a request to the leader's table.
type Op uint8

// The requests a holder's agent sends the leader.
const (
	// OpAcquire asks for a name; with Wait the request queues while the
	// name is held, and is refreshed by repeating it.
	OpAcquire Op = iota + 1
	// OpRenew extends a held lease; to a new leader in its grace it is a
	// re-claim.
	OpRenew
	// OpRelease gives a lease up, or leaves the queue.
	OpRelease
)

var opNames = map[Op]string{OpAcquire: "acquire", OpRenew: "renew", OpRelease: "release"}

// String returns the lower-case name of o.
func (o Op) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return "op?"
}

// Policy says how the leader picks the next holder among a name's waiters.
type Policy uint8

// The policies.
const (
	// FIFO grants waiters in the order they arrived (locks).
	FIFO Policy = iota
	// Spread grants the waiter whose node holds the fewest Spread leases,
	// ties broken by rendezvous hashing of the name over the nodes (tasks):
	// different names land on different nodes.
	Spread
	// Share is a partition of a group (Request.Group): the leader grants it
	// to the member node holding the fewest of the group's partitions, and
	// asks members holding more than their share (the partitions divided
	// by the members, rounded up) to give the excess back (Reply.Revoke)
	// while another member holds less than its share rounded down.
	Share
)

// Holder names one holder: a session (a socket connection, a `tenure run`)
// on a node. A node may hold several names, and wait for one name from
// several sessions.
type Holder struct {
	Node    leasing.Node `msgpack:"node"`
	Session uint64       `msgpack:"session"`
}

// String formats h for logs.
func (h Holder) String() string { return fmt.Sprintf("%s/%d", h.Node.Name, h.Session) }

// Request is one request from a holder's agent to the leader.
type Request struct {
	Op Op `msgpack:"op"`
	// Term is the epoch of the term the sender believes the receiver
	// leads; any other is refused with CodeNotLeader.
	Term uint64 `msgpack:"term"`
	// Seq numbers the sending agent's requests; replies and later grants
	// echo it, and the holder counts its lease from its send time.
	Seq    uint64        `msgpack:"seq"`
	Name   string        `msgpack:"name"`
	Holder Holder        `msgpack:"holder"`
	Token  uint64        `msgpack:"token,omitempty"` // renew, release
	TTL    time.Duration `msgpack:"ttl"`
	Wait   bool          `msgpack:"wait,omitempty"`
	Policy Policy        `msgpack:"policy,omitempty"`
	// Group names the group a Share name is a partition of.
	Group string `msgpack:"group,omitempty"`
}

// Code is the outcome of a request.
type Code string

// The outcomes.
const (
	// CodeGranted: the holder holds Name with Token for TTL counted from
	// the send time of request Seq.
	CodeGranted Code = "granted"
	// CodeQueued: the request waits at Position (1 is next).
	CodeQueued Code = "queued"
	// CodeBusy: the name is held (or, in a new leader's grace, may still
	// be) and the request did not wait.
	CodeBusy Code = "busy"
	// CodeLost: the lease is not held by this holder (any more).
	CodeLost Code = "lost"
	// CodeReleased answers a release.
	CodeReleased Code = "released"
	// CodeNotLeader: the receiver does not lead the request's term.
	CodeNotLeader Code = "not_leader"
	// CodeInvalid: the request is malformed or out of bounds (Message says
	// why).
	CodeInvalid Code = "invalid"
)

// Reply answers a Request; a grant to a waiter is also pushed as a Reply.
type Reply struct {
	Seq      uint64        `msgpack:"seq"`
	Term     uint64        `msgpack:"term"`
	Name     string        `msgpack:"name"`
	Holder   Holder        `msgpack:"holder"`
	Code     Code          `msgpack:"code"`
	Token    uint64        `msgpack:"token,omitempty"`
	TTL      time.Duration `msgpack:"ttl,omitempty"`
	Position int           `msgpack:"position,omitempty"`
	// Current is who holds the name when the request was refused (busy,
	// lost), when known.
	Current string `msgpack:"current,omitempty"`
	Message string `msgpack:"message,omitempty"`
	// Revoke asks the holder of a granted partition to give it back: stop
	// using it, then release it (the lease stays renewed meanwhile).
	Revoke bool `msgpack:"revoke,omitempty"`
}

// Token returns the fencing token of the n-th grant (from 1) of the term
// with epoch epoch: the epoch in the high 32 bits, n in the low 32 bits.
func Token(epoch uint64, n uint32) uint64 { return epoch<<32 | uint64(n) }

// TokenEpoch returns the epoch part of a token.
func TokenEpoch(token uint64) uint64 { return token >> 32 }

// MaxEpoch is the highest epoch whose terms can grant named leases.
const MaxEpoch = 1<<32 - 1

// MaxName is the longest name, in bytes.
const MaxName = 128

// ErrBadName reports a name that is empty, too long, or has a character
// outside [A-Za-z0-9._:/@+=-].
var ErrBadName = errors.New("named: bad name")

// CheckName returns an error wrapping ErrBadName when name cannot be used.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrBadName)
	case len(name) > MaxName:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrBadName, len(name), MaxName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' ||
			c == ':' || c == '/' || c == '@' || c == '+' || c == '=' || c == '-'
		if !ok {
			return fmt.Errorf("%w: %q has the character %q at byte %d (allowed: letters, digits and . _ : / @ + = -)", ErrBadName, name, c, i)
		}
	}
	return nil
}
