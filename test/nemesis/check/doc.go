// Package check is the independent checker of a nemesis run: it reads what
// the agents, the writers and the fault harness recorded in a run directory
// and decides whether tenure's invariants (docs/DESIGN.md, §1) held.
//
// It owns the formats of four kinds of files (journals, histories, events,
// and the watch streams of `tenure watch --json`; see JournalRecord, Op,
// Event and View), the reconstruction of each node's
// believed-valid lease intervals from its journal, and seven checks:
//
//	I1                one lease at a time: no two nodes' intervals overlap
//	I2                epochs: no epoch led twice, leads in strictly increasing epochs
//	I3                stopped children: every write invoked inside its node's term
//	I4-linearizable   the store's history is linearizable (porcupine)
//	I4-monotone       no write accepted below an epoch already accepted
//	I5                liveness: a leader within TTL+ElectionBound of every heal,
//	                  and no longer than that without one during a fault
//	                  the harness says left a majority of the voters up
//	                  and connected (EventQuorate)
//	hand-over         an operator's hand-over, made with no fault on, gives
//	                  the next node its lease before the old one ran out,
//	                  and the node that handed over does not take it back
//
// The hand-overs (HandOvers) are each act of an operator that met the
// lease holder: a graceful stop or drain of it, a transfer or a resign,
// and how long after it the next node held a lease. Those made under a
// fault (a partition, a kill or a pause), or refused by the agent, are
// measured, not judged.
//
// The faults (FaultSpans), measured for all and judged by I5 only where a
// majority stayed connected, are each fault from its first event to its
// heal and the longest time in it no node held a lease: a term lost
// during a fault and another won before the heal leaves no trace at the
// heal.
//
// The blips (Blips), measured only, are the followers whose watch stream
// said "no leader" and then named the same leader in the same term again
// (their agent not restarted in between): status, watchers and no-leader
// hooks on that node were told of a vacancy that was not there.
//
// The package shares no code with the agent: it imports nothing of
// github.com/tenurehq/tenure, only the standard library and porcupine, so a
// bug in the agent's own notion of leases, epochs or time cannot hide
// itself by being repeated here.
//
// The stale views (StaleViews), measured only, are the mirror of the
// blips: followers that went on naming a leader for MinStale or more after
// its term had ended (its status and watchers pointed at a node that no
// longer led).
//
// What it does not check: it trusts the clock the files were stamped with
// (one machine's wall clock, so comparisons are exact) and the harness's
// account of its own faults. A check passes vacuously when its input is
// empty; Report.Counts says how much was checked.
package check
