// Package gossip owns how tenure agents find and reach each other: cluster
// membership through hashicorp/serf (memberlist underneath) and the direct
// peer transport that carries election and lease messages between two agents.
// It knows nothing of election rules.
//
// # Membership
//
// Start creates a Membership: a serf instance whose local member advertises
// tenure's reserved tags (node ID, peer transport address, voter and eligible
// flags, and whether this run is leaving) next to any extra tags. Members
// and Events expose tenure's own Member and Event types; no serf or
// memberlist type appears in this package's API.
// Events carry one member each, in the order serf reported them, through an
// unbounded queue, so a slow reader never blocks serf. Failure detection is
// SWIM with suspicion (memberlist); its speed is set by Timing (LANTiming for
// real networks, LocalTiming for loopback tests and demos) and estimated by
// Timing.FailureDetectionBound.
//
// Serf reconnects to failed members every ReconnectInterval until
// ReconnectTimeout, so the halves of a healed partition, or a member that
// restarts on the same address, find each other again without a new join.
// When a failed member comes back by other means (it refuted its failure),
// a few members run a full state exchange with it, so that it learns the
// whole cluster at once rather than at the next periodic sync.
// With Config.SnapshotPath a restarted node rejoins the peers it knew, even
// without Config.Join, and even after a graceful Leave (RejoinAfterLeave).
//
// What arrives on the gossip port is screened before memberlist reads it,
// so that no sender can make it hold much more memory than a cluster of
// Config.MaxMembers members needs: at most Config.MaxInboundStreams inbound
// streams are open at once, each must deliver its first message within
// Timing.TCPTimeout (at most 5 s), and while it has not, a newer stream
// closes it when the limit is reached; a first message larger than 32 KiB
// plus 1 KiB per member (compressed or not), or a push-pull listing more
// members, is refused before memberlist allocates anything for it; packets
// larger than 8 KiB, or compressed into more, are dropped. Encrypted streams
// cannot be read before memberlist decrypts them, so only their size is
// checked. Refusals are logged at most once per RefusalLogInterval with
// counts, and serf's and memberlist's warnings are rate-limited by a kind
// that sent bytes cannot vary.
//
// What is not guaranteed: membership is eventually consistent. Two members may
// see different member lists, or the same member in different states, for a
// while; a member that is only slow may be declared failed. Do not treat "alive
// in my view" as a quorum decision.
//
// # Peer transport
//
// A Transport serves requests with a Handler and makes requests with Call. It
// carries opaque byte slices; callers define their own messages. Each request
// and response travels as one frame of package internal/wire (a 4-byte
// big-endian length, then msgpack), holding a msgpack map:
//
//	request:  {"b": <bin: request bytes>}
//	response: {"b": <bin: response bytes>, "e": <str: handler error, "" if none>}
//
// A connection carries any number of requests, one at a time: the client
// writes a request frame and reads exactly one response frame before it sends
// the next. Idle client connections are pooled per peer address, so a call on
// a warm connection costs one network round trip. At most one new connection
// to a peer is dialled at a time; its handshake is bounded by DialTimeout
// rather than by the call that needed it (the TCP connect is bounded by
// both), and a call that ends before its response arrives
// leaves the connection to drop that late response and return to the pool:
// on an overloaded host, handshakes and connections are not thrown away
// with every call that times out. A malformed or oversized
// frame closes the connection it arrived on; other connections are unaffected.
// A non-empty "e" reaches the caller as a *RemoteError.
//
// A request is sent at most once. Call retries once, on a fresh connection,
// only when a pooled connection failed before any byte of the request was
// written; any later failure is returned, because the far side may already
// have acted on the request. Errors that wrap ErrUnreachable mean the request
// was certainly not delivered. CallRetried also says whether an answered
// call's time counts a retransmission (on Linux, the connection's count of
// retransmitted segments rose during it) or a wait on a stale connect: a
// caller that estimates round trips leaves such calls out (Karn's rule).
//
// The transport speaks plain TCP unless TransportConfig.Wrap adds a layer
// (such as TLS) to every connection.
//
// An inbound connection is unproven until it completes Wrap.Server (with
// KeyedTLS, proving the cluster key) or, without Wrap, sends a well-formed
// request. Unproven connections have ProveTimeout and a limit of their own,
// MaxUnprovenConns, at which a new one closes the oldest; proven ones are
// bounded by MaxConns and closed after twice IdleTimeout idle. Idle or
// silent connections therefore cannot keep peers out.
package gossip
