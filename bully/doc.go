// Package bully owns the election state machine: who should campaign, the
// ELECTION / ANSWER / COORDINATOR exchange, preemption of a lower leader, and
// the rank-ordered, jittered back-off that keeps a leader's death from waking
// every node at once.
//
// A Machine is deterministic: its inputs are the live membership (SetMembers),
// peer messages (Step), the outcome of the lease round that gates leadership
// (Acquired, AcquireFailed, LeaseLost), operator requests (Resign,
// ResignWith with a hold or a successor, SetEligible for a drain), what the
// driver measured (SetReach: whether the voters are reachable;
// SetRoundTrip: how long peers take to answer; PreemptAnswered: whether a
// higher node it would yield to can take the term) and the passage of time
// (Tick). Every input takes the current instant from the
// caller's clock; the Machine never reads a clock, sleeps or does I/O, and its
// only randomness comes from Config.Rand. Outputs are collected by Ready: the
// messages to send, a lease round to run or release, a higher node to ask
// before yielding to it (with Config.ConfirmPreempt), and the highest epoch,
// which the driver persists before it sends anything.
//
// What it does not guarantee. The bully algorithm alone cannot keep two nodes
// from leading: on each side of a partition the highest node it can see wins.
// Safety comes from the gate: a won election only asks for a lease round
// (Ready.Acquire), and the node leads once the driver reports Acquired. In
// available mode the driver grants at once; in quorum mode a majority of voters
// must grant (package leasing). Epochs grow on every node that observes them,
// but two sides of a partition in available mode may choose the same epoch.
//
// A Machine is not safe for concurrent use; one driver goroutine owns it.
package bully
