// Package named owns named leases: short leases on names ("migrations",
// "task/report", a partition of a group) that the cluster leader grants,
// renews and releases, each fenced by a token of its own. It is the
// leader's lock table (Table) and each agent's record of the leases its
// local clients hold or wait for (Claims), both deterministic over the
// caller's clock; the agent carries their messages over the peer
// transport.
//
// Why a name is never held twice (docs/DESIGN.md §9 has the whole
// argument):
//
//   - A leader grants only while its own leader lease is valid, so every
//     grant of a term happens before the next term starts.
//   - A holder counts its lease from the send time of the request the grant
//     answers, shortened by the drift bound; the leader counts from when it
//     received that request, in full. The holder's belief ends first.
//   - A new leader grants a name that nobody re-claimed only after its
//     grace, which is at least the TTL of every grant the terms before it
//     made; during the grace it adopts re-claims: renewals sent by holders
//     after they learnt of its term. At most one holder per name can still
//     hold a valid grant after the term started, so adopting it is safe.
//   - Requests name the term they are addressed to and a leader answers
//     only requests for its own term.
//
// Tokens are the leader's epoch in the high 32 bits and a counter of the
// term's grants in the low 32 bits (Token): they grow per name across
// leader changes and restarts without any write to disk, because epochs
// grow (I2). Tokens are only comparable between leases of the same name.
package named
