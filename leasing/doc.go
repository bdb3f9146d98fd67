// Package leasing owns leases and epochs: the epoch that numbers every term
// and serves resources as a fencing token, persisted so that it only grows
// across restarts.
//
// It holds the durable epoch stores; the voter side of the lease protocol
// (Voter: promises, persisted highest grant, startup hold); the candidate
// side (Round: acquire / renew counted against a Roster, joint rosters
// needing both majorities); the validity arithmetic with a drift bound
// (Timing); the Roster and its store; and Fence, DurableFence, KeyedFence
// and DurableKeyedFence, the resource side of I4: a resource admits each
// write's token, then applies the write under the same lock.
//
// Everything here is deterministic over the caller's clock; the only I/O is
// the atomic replacement of small checksummed state files. Leasing knows
// nothing of who should lead: package bully decides that and the agent asks
// for a lease round.
package leasing
