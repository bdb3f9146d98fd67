package agent

import "time"

// roundTrips estimates how long a peer takes to answer one of this node's
// messages, the way TCP computes its retransmission timeout (RFC 6298):
// a smoothed round trip and its mean deviation, each answered call a
// sample, and the estimate the smoothed value plus four deviations. The
// election waits that long for an ANSWER when it is longer than its
// timeout (bully.Machine.SetRoundTrip), and reach probes and acquire
// rounds wait that long for the voters when it is longer than the acquire
// budget (core.peerWait). Calls that failed are not samples: a dead or
// cut-off peer must not slow the elections that pass it over. Nor are
// calls whose packets the kernel retransmitted (Karn's rule; see
// core.peerReplied): a cut that held them and healed is no slow peer. An
// estimate without a sample for roundTripMemory is dropped: the load that
// made it has most likely passed, and the election's own timeout applies
// until the next answers measure again.
type roundTrips struct {
	srtt, rttvar time.Duration
	last         time.Time // the latest sample; zero when none
}

// roundTripMemory is how long an estimate outlives its latest sample.
const roundTripMemory = 30 * time.Second

// add records a peer call answered at now after took.
func (r *roundTrips) add(now time.Time, took time.Duration) {
	if r.fresh(now) {
		r.rttvar = (3*r.rttvar + (r.srtt - took).Abs()) / 4
		r.srtt = (7*r.srtt + took) / 8
	} else {
		r.srtt, r.rttvar = took, took/2
	}
	r.last = now
}

// fresh reports whether the estimate has a sample from the last
// roundTripMemory.
func (r *roundTrips) fresh(now time.Time) bool {
	return !r.last.IsZero() && now.Sub(r.last) < roundTripMemory
}

// timeout is how long a peer's answer may take as of now: zero when no
// recent sample says.
func (r *roundTrips) timeout(now time.Time) time.Duration {
	if !r.fresh(now) {
		return 0
	}
	return r.srtt + 4*r.rttvar
}

// peerWait is how long a reach probe or an acquire round waits for the
// voters' answers, as of now: the acquire budget, or the measured round
// trip of peer calls when longer, at most maxPeerWait. While 100 agents
// started on two cores the voters answered probes in about a second: with
// the fixed budget the nodes near the top of the fleet found themselves
// cut off from the voters, and a cut-off node answers no ELECTION, so a
// node far below them won the first term and was preempted seconds later
// (docs/DESIGN.md §4, "the peer wait").
func (c *core) peerWait(now time.Time) time.Duration {
	return min(max(c.cfg.Lease.AcquireBudget, c.rtt.timeout(now)), c.maxPeerWait())
}

// maxPeerWait bounds peerWait: at most the election's coordinator timeout,
// which the nodes that deferred to a candidate wait for its COORDINATOR
// once its lease round is over, and at most half of what a renewal
// interval leaves of the lease's validity (the bound
// leasing.Timing.Validate sets on the acquire budget), so that a term won
// at the end of the wait, its validity counted from the round's start,
// still has room for its first renewal and a retry. Never below the
// acquire budget.
func (c *core) maxPeerWait() time.Duration {
	lt := c.cfg.Lease
	return max(lt.AcquireBudget, min(c.cfg.Election.CoordinatorTimeout, (lt.Validity()-lt.RenewInterval())/2))
}
