// Package redislock takes named locks in Redis, the way many teams already
// do, with the same shape as tenure's own named leases (rpc.Lock), so that
// `tenure lock --backend redis://...` or `--backend redlock://...` runs a
// command under a Redis lock exactly as under a tenure lock.
//
// Two algorithms, one type (Locker):
//
//   - The single-instance lock (NewSingle, redis://HOST:PORT): SET key value
//     NX PX ttl with a random value, renewed only while the key still holds
//     that value and released by compare-and-delete, both by Lua scripts.
//     The acquire script also INCRs a counter key of the name and returns
//     it: a fencing token that grows with every grant of the name, which a
//     resource can check exactly as it checks tenure's tokens
//     (leasing.KeyedFence). It grows only as long as Redis keeps the counter:
//     an instance restarted without its data, or a replica promoted before
//     it received the INCR, hands out a token again.
//
//   - Redlock over N independent instances (NewRedlock,
//     redlock://H1:P1,H2:P2,H3:P3), as its description specifies: the same
//     SET NX PX on every instance in parallel, each bounded by a timeout far
//     below the TTL; the lock is held when a majority (N/2+1) granted it and
//     the validity, TTL − the time spent acquiring − a drift allowance
//     (DriftFactor × TTL + 2 ms), is still positive; otherwise it is
//     released on every instance (also those that did not answer) and tried
//     again after a random delay. Extending runs the renew script on every
//     instance and needs a majority within the validity again.
//
// Redlock has NO fencing token: its random value is unique but not
// ordered, so a resource cannot tell a stale holder from a current one.
// Lease.Token reports (0, false) for it, and tenure lock sets no
// TENURE_TOKEN and refuses Redlock with --require-token. A holder paused
// past its TTL (a GC, a stopped VM) wakes still believing it holds the
// lock; only a fencing token checked by the resource stops its writes.
// An instance that restarts empty while a lock is held lets another client
// win a majority too: two holders at once (the failure Redlock's critics
// describe; redlock_test.go shows it). docs/GUARANTEES.md ("Choosing a
// lock") compares the backends.
//
// A Lease renews itself in the background every TTL/3 until Unlock; when a
// renewal finds the lock no longer ours, or the deadline passes without a
// successful renewal, Lost's channel closes and Err says why.
package redislock
