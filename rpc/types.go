package rpc

import (
	"context"
	"time"
)

// The types below travel in response bodies and are also what
// `tenure status --json` and friends print, so their msgpack and JSON names
// are identical and must not change.

// LeaderInfo names a leader and the epoch of its term.
type LeaderInfo struct {
	// Node is the leader's node name.
	Node string `msgpack:"node" json:"node"`
	// ID is the leader's node ID.
	ID uint64 `msgpack:"id" json:"id"`
	// Epoch numbers the leader's term; use it as a fencing token.
	Epoch uint64 `msgpack:"epoch" json:"epoch"`
}

// Status describes the answering node.
type Status struct {
	// Node is this node's name.
	Node string `msgpack:"node" json:"node"`
	// ID is this node's ID.
	ID uint64 `msgpack:"id" json:"id"`
	// IsLeader reports whether this node holds leadership now.
	IsLeader bool `msgpack:"is_leader" json:"is_leader"`
	// Leader is the known leader, or nil when none is known.
	Leader *LeaderInfo `msgpack:"leader" json:"leader"`
	// Epoch is the highest epoch this node knows.
	Epoch uint64 `msgpack:"epoch" json:"epoch"`
	// LeaseRemainingMS is how long this node's lease still runs, in
	// milliseconds; 0 when it does not lead.
	LeaseRemainingMS int64 `msgpack:"lease_remaining_ms" json:"lease_remaining_ms"`
	// LeaseTTLMS is the configured lease TTL in milliseconds (quorum mode;
	// 0 in available mode). The lease left just before a renewal is about
	// two thirds of it.
	LeaseTTLMS int64 `msgpack:"lease_ttl_ms" json:"lease_ttl_ms"`
	// Members counts the live members.
	Members int `msgpack:"members" json:"members"`
	// State is "leader", "follower", "candidate", "no-quorum", or another
	// state the agent defines.
	State string `msgpack:"state" json:"state"`
	// Consistency is "available" or "quorum".
	Consistency string `msgpack:"consistency" json:"consistency"`
	// Reason says why there is no leader, when known.
	Reason string `msgpack:"reason,omitempty" json:"reason,omitempty"`
	// Quorum is this node's own lease count: the grants of its last lease
	// round (0 when it runs none, as a follower) against the grants a
	// lease needs under its roster (quorum mode; nil in available mode).
	// See docs/PROTOCOL.md §6.1.
	Quorum *QuorumInfo `msgpack:"quorum" json:"quorum"`
	// Roster is the voter roster this node knows (quorum mode; nil before
	// it has one).
	Roster *RosterInfo `msgpack:"roster" json:"roster"`
	// Drained reports that this node was drained (OpDrain): it does not
	// lead until the drain is lifted, across restarts.
	Drained bool `msgpack:"drained" json:"drained"`
	// Storage, when not empty, is the last write to this node's data dir
	// that failed (a full or failing disk): the node does not lead or
	// campaign until a write succeeds; it tries again every few seconds,
	// and meanwhile follows the leader and answers queries.
	Storage string `msgpack:"storage,omitempty" json:"storage,omitempty"`
}

// QuorumInfo counts the grants of a lease round.
type QuorumInfo struct {
	// Have is how many voters granted.
	Have int `msgpack:"have" json:"have"`
	// Need is the majority of the roster (of a joint roster, of the set
	// further from its majority): Have >= Need exactly when the round won.
	Need int `msgpack:"need" json:"need"`
}

// RosterInfo describes the voter roster: the voters whose majority grants a
// lease.
type RosterInfo struct {
	// ClusterID names the cluster the roster belongs to.
	ClusterID string `msgpack:"cluster_id" json:"cluster_id"`
	// Version grows with every change of the roster.
	Version uint64 `msgpack:"version" json:"version"`
	// Voters are the voters' node names, sorted.
	Voters []string `msgpack:"voters" json:"voters"`
}

// Member status values (Member.Status).
const (
	MemberAlive   = "alive"
	MemberLeaving = "leaving"
	MemberLeft    = "left"
	MemberFailed  = "failed"
)

// Member is one cluster member as the answering node sees it.
type Member struct {
	// Name is the member's node name.
	Name string `msgpack:"name" json:"name"`
	// ID is the member's node ID.
	ID uint64 `msgpack:"id" json:"id"`
	// Addr is the member's gossip address (host:port).
	Addr string `msgpack:"addr" json:"addr"`
	// PeerAddr is the member's direct peer-transport address (host:port).
	PeerAddr string `msgpack:"peer_addr" json:"peer_addr"`
	// Status is one of MemberAlive, MemberLeaving, MemberLeft, MemberFailed.
	Status string `msgpack:"status" json:"status"`
	// Voter reports whether the member may vote (it runs with --voter):
	// the leader promotes such members to fill the voter set. Role says
	// whether it votes now.
	Voter bool `msgpack:"voter" json:"voter"`
	// Role is the member's place in the roster as this node knows it: one
	// of RoleVoter, RoleStaging, RoleLeaving, RoleObserver, RoleLeft.
	Role string `msgpack:"role,omitempty" json:"role,omitempty"`
	// Zone is the failure domain the member advertises ("" when none).
	Zone string `msgpack:"zone,omitempty" json:"zone,omitempty"`
	// Eligible reports whether the member may lead.
	Eligible bool `msgpack:"eligible" json:"eligible"`
	// IsLeader reports whether the member is the known leader.
	IsLeader bool `msgpack:"is_leader" json:"is_leader"`
	// Drained reports that the member was drained (OpDrain); it is then
	// not Eligible either.
	Drained bool `msgpack:"drained" json:"drained"`
	// StorageFailed reports that the member cannot write its data dir
	// (Status.Storage); it is then not Eligible either.
	StorageFailed bool `msgpack:"storage_failed,omitempty" json:"storage_failed,omitempty"`
}

// Member roles (Member.Role).
const (
	// RoleVoter grants leases: a voter of the roster.
	RoleVoter = "voter"
	// RoleStaging is being added: a voter of the new set of a joint
	// roster, not of the old one.
	RoleStaging = "staging"
	// RoleLeaving is being removed: a voter of the old set of a joint
	// roster only.
	RoleLeaving = "leaving"
	// RoleObserver follows the leader without a vote.
	RoleObserver = "observer"
	// RoleLeft has left the cluster (gracefully, or force-left) and is no
	// voter.
	RoleLeft = "left"
)

// Event names (Event.Event).
const (
	EventLeaderChanged  = "leader-changed"
	EventBecameLeader   = "became-leader"
	EventLostLeadership = "lost-leadership"
	EventNoLeader       = "no-leader"
	EventMemberJoin     = "member-join"
	EventMemberLeave    = "member-leave"
	EventMemberFailed   = "member-failed"
	EventMemberUpdate   = "member-update"
	// EventTaskAcquired and EventTaskLost: a singleton task (a lock
	// session with Task, such as `tenure run --task`) started or stopped
	// being held on this node; Task and Token name it.
	EventTaskAcquired = "task-acquired"
	EventTaskLost     = "task-lost"
)

// Event is one leadership or membership change, as streamed by a watch.
type Event struct {
	// Time is when the event happened: RFC 3339 with nanoseconds, UTC. A
	// watch's first event, which reports the current state, carries the
	// time that state began (see docs/PROTOCOL.md section 6.8).
	Time string `msgpack:"time" json:"time"`
	// Event is one of the Event constants.
	Event string `msgpack:"event" json:"event"`
	// Leader is the leader after the event, or nil when none is known: for
	// lost-leadership, the successor once known, never the node that lost
	// leadership in its ended term.
	Leader *LeaderInfo `msgpack:"leader" json:"leader"`
	// Epoch is the epoch of the term a leadership event is about: the term
	// that began (leader-changed, became-leader) or ended
	// (lost-leadership); 0 for no-leader and member events.
	Epoch uint64 `msgpack:"epoch" json:"epoch"`
	// Node is the node the event is about: the member for member events,
	// the reporting node otherwise.
	Node string `msgpack:"node" json:"node"`
	// Member describes the member for member events.
	Member *Member `msgpack:"member,omitempty" json:"member,omitempty"`
	// Task and Token name the task and its fencing token for task events.
	Task  string `msgpack:"task,omitempty" json:"task,omitempty"`
	Token uint64 `msgpack:"token,omitempty" json:"token,omitempty"`
	// Forgot, on a no-leader event, names the leader this node knew
	// before and why it stopped following it ("h4: it resigned"); empty
	// when it knew none, and on other events.
	Forgot string `msgpack:"forgot,omitempty" json:"forgot,omitempty"`
}

// Backend answers the server's requests; the agent implements it.
//
// The server calls its methods from one goroutine per connection, so they
// may run concurrently. Each must return promptly once ctx is cancelled:
// Server.Close cancels it and then waits for every call to return.
// Errors that wrap one of this package's sentinel errors (ErrNoLeader,
// ErrNotLeader, ...) reach the client with that error's code, and the
// server then keeps or closes the connection as that code says
// (docs/PROTOCOL.md section 8); any other error is logged and reported as
// ErrInternal. To refuse a request for its values, wrap ErrInvalidArgument
// (ErrBadRequest would close the client's connection); an ErrNoLeader
// should say why there is none.
type Backend interface {
	// Status describes this node.
	Status(ctx context.Context) (Status, error)
	// Leader returns the known leader, or an error wrapping ErrNoLeader.
	Leader(ctx context.Context) (LeaderInfo, error)
	// Members lists the members this node knows.
	Members(ctx context.Context) ([]Member, error)
	// Resign gives up leadership and stays out of elections for the
	// request's hold, or returns an error wrapping ErrNotLeader when this
	// node does not lead.
	Resign(ctx context.Context, req ResignRequest) error
	// Drain makes this node ineligible to lead, now and across restarts
	// (resigning if it leads), or eligible again with req.Off.
	Drain(ctx context.Context, req DrainRequest) error
	// Transfer hands the leader's term to the named member, through the
	// leader; errors wrap ErrNoLeader, ErrNotFound or ErrInvalidArgument.
	Transfer(ctx context.Context, name string) error
	// Watch subscribes to events. The first value(s) sent describe the
	// current state. The Backend closes the channel to end a subscriber that
	// fell too far behind (the server then tells the client too_slow); when
	// the server itself is closing it tells the client shutting_down. cancel is idempotent and the server always calls
	// it. The server receives promptly but may block for up to
	// ServerConfig.WriteTimeout on a slow client, so a Backend must not let
	// one subscriber hold up the others (buffer, or coalesce).
	Watch(ctx context.Context) (events <-chan Event, cancel func(), err error)
	// WatchRunner subscribes as Watch does and registers the subscriber as
	// a runner whose stop takes up to reg.Grace (between 1ms and
	// MaxRunnerGrace; the server checks), for as long as the subscription
	// lasts: when a term this node led ends, the Backend waits for every
	// runner it told of that term to report Stopped(epoch) (or to leave, and
	// its registered process group to be gone) before it lets the lease go.
	// The server calls the subscription's Stopped and Running from the
	// connection's reader goroutine, in frame order, never after it has
	// called Cancel; they must not block. An error wrapping ErrInvalidArgument
	// refuses the registration (a grace the Backend will not accept).
	WatchRunner(ctx context.Context, reg RunnerRegistration) (RunnerSubscription, error)
	// Lock starts a lock session for a named lease (see LockSession);
	// errors wrap ErrInvalidArgument (a bad name or TTL, available mode).
	Lock(ctx context.Context, req LockRequest) (LockSession, error)
	// Locks lists the leader's named leases; errors wrap ErrNoLeader.
	Locks(ctx context.Context) ([]LockInfo, error)
	// Check answers whether epoch is this node's live term.
	Check(ctx context.Context, epoch uint64) (CheckResult, error)
	// ForceLeave removes a voter from the roster through the leader.
	ForceLeave(ctx context.Context, name string) error
	// Keys lists, installs, makes primary or removes a cluster key on every
	// member.
	Keys(ctx context.Context, req KeysRequest) (KeyringInfo, error)
}

// MaxRunnerGrace bounds the grace a runner may register with
// (RunnerRequest.GraceMS).
const MaxRunnerGrace = time.Hour

// WatchRequest is the optional body of OpWatch.
type WatchRequest struct {
	// Runner, when not nil, registers the watching connection as a runner
	// for as long as it stays open: the agent then waits for its stopped
	// frames before it releases the lease of a term that ends.
	Runner *RunnerRequest `msgpack:"runner" json:"runner"`
}

// RunnerRequest describes a runner: a process such as `tenure run` that
// runs work only while this node leads.
type RunnerRequest struct {
	// GraceMS is how long the runner's stop may take, in milliseconds:
	// from SIGTERM to SIGKILL. 1 to MaxRunnerGrace.
	GraceMS uint64 `msgpack:"grace_ms" json:"grace_ms"`
}

// StoppedRequest is the body of OpStopped.
type StoppedRequest struct {
	// Epoch is the term whose work the runner has stopped (or never
	// started); at least 1.
	Epoch uint64 `msgpack:"epoch" json:"epoch"`
}

// RunningRequest is the body of OpRunning.
type RunningRequest struct {
	// Epoch is the term the runner's work was started for; at least 1.
	Epoch uint64 `msgpack:"epoch" json:"epoch"`
	// PGID is the process group the work runs in; more than 1.
	PGID int64 `msgpack:"pgid" json:"pgid"`
}

// Peer identifies the process at the other end of a connection, as the
// kernel reports it (SO_PEERCRED). Known is false where it cannot be had.
type Peer struct {
	PID, UID int
	Known    bool
}

// RunnerRegistration is what the server knows of a runner that registers.
type RunnerRegistration struct {
	// Grace is how long the runner's stop may take, SIGTERM to SIGKILL.
	Grace time.Duration
	// Peer is the process that opened the runner's connection.
	Peer Peer
}

// RunnerSubscription is a runner's event stream and the receivers of its
// frames, returned by Backend.WatchRunner.
type RunnerSubscription struct {
	// Events is the stream, as for Watch.
	Events <-chan Event
	// Stopped receives each stopped frame's epoch.
	Stopped func(epoch uint64)
	// Running receives each running frame: the runner's work for epoch
	// runs in process group pgid. An error refuses the registration (a
	// group the Backend cannot attribute to the peer); the server logs it
	// and the watch goes on. Nil: running frames are ignored.
	Running func(epoch uint64, pgid int) error
	// Cancel ends the subscription; the server always calls it.
	Cancel func()
}

// CheckRequest is the body of OpCheck.
type CheckRequest struct {
	// Epoch is the term the caller believes it acts in.
	Epoch uint64 `msgpack:"epoch" json:"epoch"`
}

// CheckResult answers OpCheck.
type CheckResult struct {
	// Current is true when Epoch is the term this node leads right now,
	// with a valid lease: the caller may act as leader with that token.
	Current bool `msgpack:"current" json:"current"`
	// IsLeader reports whether this node leads now (in any term).
	IsLeader bool `msgpack:"is_leader" json:"is_leader"`
	// Epoch is the epoch of the term this node knows of (0 when none).
	Epoch uint64 `msgpack:"epoch" json:"epoch"`
	// LeaseRemainingMS is how long this node's lease still runs, in
	// milliseconds (0 when it does not lead, or in available mode).
	LeaseRemainingMS int64 `msgpack:"lease_remaining_ms" json:"lease_remaining_ms"`
}

// MaxResignHold bounds ResignRequest.HoldMS.
const MaxResignHold = 7 * 24 * time.Hour

// ResignRequest is the optional body of OpResign.
type ResignRequest struct {
	// HoldMS is how long the node stays out of elections after it
	// resigned, in milliseconds; 0 means the agent's resign hold. At most
	// MaxResignHold.
	HoldMS uint64 `msgpack:"hold_ms" json:"hold_ms"`
}

// DrainRequest is the body of OpDrain.
type DrainRequest struct {
	// Off lifts the drain: the node is eligible again (unless its
	// configuration says otherwise).
	Off bool `msgpack:"off" json:"off"`
}

// TransferRequest is the body of OpTransfer.
type TransferRequest struct {
	// Name is the member that should lead next.
	Name string `msgpack:"name" json:"name"`
}

// ForceLeaveRequest is the body of OpForceLeave.
type ForceLeaveRequest struct {
	// Name is the voter's node name.
	Name string `msgpack:"name" json:"name"`
}

// Key actions of KeysRequest.Action.
const (
	KeysList    = "list"
	KeysInstall = "install"
	KeysUse     = "use"
	KeysRemove  = "remove"
)

// KeysRequest is the body of OpKeys.
type KeysRequest struct {
	// Action is KeysList, KeysInstall, KeysUse or KeysRemove.
	Action string `msgpack:"action" json:"action"`
	// Key is the base64 key to install, use or remove ("" for list).
	Key string `msgpack:"key" json:"key"`
}

// KeyringInfo answers OpKeys: the cluster's keys as its members reported.
type KeyringInfo struct {
	// Keys counts, per base64 key, the members that have it installed
	// (list only).
	Keys map[string]int `msgpack:"keys" json:"keys"`
	// PrimaryKeys counts, per base64 key, the members using it as primary
	// (list only).
	PrimaryKeys map[string]int `msgpack:"primary_keys" json:"primary_keys"`
	// NumNodes, NumResp and NumErr count the members asked, answering and
	// failing.
	NumNodes int `msgpack:"num_nodes" json:"num_nodes"`
	NumResp  int `msgpack:"num_resp" json:"num_resp"`
	NumErr   int `msgpack:"num_err" json:"num_err"`
	// Messages holds each failing member's message.
	Messages map[string]string `msgpack:"messages" json:"messages"`
}
