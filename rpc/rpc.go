// Package rpc owns the local socket protocol: message types, op codes, error
// codes, server, Go client. It knows nothing of election internals: the agent
// answers requests through the Backend interface.
//
// The protocol is specified byte by byte in docs/PROTOCOL.md. In short, every
// frame is a 4-byte big-endian length followed by one msgpack map (see package
// internal/wire). The client opens with a Hello and the server answers with a
// HelloReply; after that the client sends Requests and the server answers each
// with a Response carrying the same seq. A watch request turns the connection
// into a one-way stream of events; a runner's watch (Client.WatchAsRunner)
// also carries the runner's stopped reports, which the agent waits for
// before it releases the lease of a term that ended.
//
// What is not guaranteed: the answers describe the agent's view when it
// answered. A leader reported by Leader or Status may have lost its lease by
// the time the caller acts; resources must check the epoch (a fencing token),
// not trust the answer.
package rpc

import "github.com/vmihailenco/msgpack/v5"

// ProtocolVersion is the only protocol version this package speaks.
const ProtocolVersion = 1

// Op names, as sent in Request.Op. New ops get a constant here and a case in
// the server's dispatch (ops.go).
const (
	// OpStatus asks for this node's Status. No request body.
	OpStatus = "status"
	// OpLeader asks for the current LeaderInfo. No request body. Fails with
	// no_leader when no leader is known.
	OpLeader = "leader"
	// OpMembers asks for the member list ([]Member). No request body.
	OpMembers = "members"
	// OpResign asks this node to give up leadership. Request body: nil, or
	// a ResignRequest; no response body. Fails with not_leader when this
	// node does not lead.
	OpResign = "resign"
	// OpWatch turns the connection into a stream of Events, starting with the
	// current state. Request body: nil, or a WatchRequest whose Runner
	// registers the connection as a runner (docs/PROTOCOL.md section 6.8).
	OpWatch = "watch"
	// OpStopped is sent by a runner on its watching connection, and only
	// there: its work for a term is not running. Request body:
	// StoppedRequest; the server sends no response.
	OpStopped = "stopped"
	// OpRunning is sent by a runner on its watching connection, and only
	// there, after it started its work: the work runs in a process group
	// the agent stops itself if the runner dies without reporting it
	// stopped. Request body: RunningRequest; the server sends no response.
	OpRunning = "running"
	// OpCheck asks whether an epoch is the live term on this node, and how
	// much lease remains. Request body: CheckRequest; response: CheckResult.
	OpCheck = "check"
	// OpForceLeave asks the leader (this node forwards it) to remove a voter
	// that will not come back from the roster. Request body:
	// ForceLeaveRequest; no response body. Fails with no_leader when no
	// leader is known, not_found when the roster has no such voter.
	OpForceLeave = "force-leave"
	// OpKeys manages the cluster keys across the cluster. Request body:
	// KeysRequest; response: KeyringInfo. Fails with bad_request when the
	// agent runs without a cluster key, or some members failed (the message
	// names them).
	OpKeys = "keys"
	// OpDrain makes this node stop being eligible to lead, now and after
	// restarts (a leader resigns), or with Off eligible again. Request
	// body: DrainRequest; no response body.
	OpDrain = "drain"
	// OpTransfer asks the leader (this node forwards it) to hand its term
	// to a named live eligible member. Request body: TransferRequest; no
	// response body. Fails with no_leader when no leader is known,
	// not_found when no live member has the name, bad_request when it may
	// not lead.
	OpTransfer = "transfer"
	// OpLock turns the connection into a lock session for a named lease
	// (docs/PROTOCOL.md section 6.12). Request body: LockRequest; stream
	// frames: LockEvent.
	OpLock = "lock"
	// OpLockRenew is sent by the client on its lock session, and only
	// there, at least once per TTL: the agent keeps renewing the lease
	// only while the client does. No body; the agent answers with a
	// renewed event.
	OpLockRenew = "lock-renew"
	// OpRelease is sent by the client on its lock session to release the
	// lease (or leave the queue); the agent ends the session with a
	// released frame.
	OpRelease = "release"
	// OpLocks lists the leader's named leases ([]LockInfo). No request
	// body. Fails with no_leader when no leader is known.
	OpLocks = "locks"
)

// Hello is the first frame a client sends.
type Hello struct {
	// Version is the protocol version the client speaks; it must be present.
	Version *uint64 `msgpack:"version"`
	// Client names the client program, for the agent's log.
	Client string `msgpack:"client"`
}

// HelloReply is the server's answer to a Hello.
type HelloReply struct {
	// Version is the protocol version the server speaks.
	Version uint64 `msgpack:"version"`
	// Agent is the agent's version string.
	Agent string `msgpack:"agent"`
	// MaxFrame is the largest frame body, in bytes, the server sends or
	// accepts on this connection.
	MaxFrame uint64 `msgpack:"max_frame"`
	// Error is nil when the handshake succeeded. Otherwise the server closes
	// the connection after this frame.
	Error *Error `msgpack:"error"`
}

// Request is one call from client to server.
type Request struct {
	// Seq is chosen by the client (1 or more) and echoed in the response.
	Seq uint64 `msgpack:"seq"`
	// Op is one of the Op constants.
	Op string `msgpack:"op"`
	// Body is the op-specific argument, or nil.
	Body msgpack.RawMessage `msgpack:"body"`
}

// Response is the server's answer to a Request, or one event of a stream.
type Response struct {
	// Seq echoes the request's seq; 0 when the error concerns the connection
	// rather than one request.
	Seq uint64 `msgpack:"seq"`
	// Error is nil on success.
	Error *Error `msgpack:"error"`
	// Body is the op-specific result, or nil.
	Body msgpack.RawMessage `msgpack:"body"`
	// Stream is true on every event frame of a watch; the frame that ends a
	// stream, and every ordinary response, carries false.
	Stream bool `msgpack:"stream"`
}
