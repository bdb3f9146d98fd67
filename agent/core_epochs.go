package agent

import "time"

// jumpReport rate-limits the reports of refused epoch jumps.
type jumpReport struct {
	next    time.Time // no report before
	count   int       // refusals since the last report
	highest uint64
	from    string
}

// jumpReportInterval bounds how often refused epoch jumps are logged.
const jumpReportInterval = 30 * time.Second

// epochJumps reports whether epoch, named by a peer's lease request, is
// more than the election's MaxEpochJump above the highest epoch this node
// has seen or granted.
func (c *core) epochJumps(epoch uint64) bool {
	base := max(c.epochs.Epoch(), c.granted.Epoch())
	return epoch > base && epoch-base > c.cfg.Election.EpochJump()
}

// observeEpoch tells the election of an epoch seen outside its messages:
// in a lease request this node's voter answered, or in a voter's floor
// reply to its probes and lease watch. Its next round then goes above it;
// the voters refuse one at or below it (stale-epoch). Before, a node that
// had not heard of another's failed round took that round's epoch and
// lost its first round to the refusals: a hand-over after a heal took
// 165-194 ms instead of 36-37 (soak seed 5909;
// TestSeenEpochsAreNotReused). An epoch that jumps is not adopted.
func (c *core) observeEpoch(epoch uint64) {
	if !c.epochJumps(epoch) {
		c.m.Observe(epoch)
	}
}

// answerFloor answers a FloorQuery: this node's stored grant, its voter's
// floor (above the grant after a release of a failed round it never
// granted: a successor that heard only of the grant would take the
// released round's epoch and lose its first round), whether it would
// refuse to grant now, and its promise.
func (c *core) answerFloor(now time.Time) *floorReply {
	fr := &floorReply{From: c.cfg.Self, Granted: c.granted.Epoch(), Holding: c.holdingVote(now), Promise: c.promiseView(now)}
	if c.grants != nil {
		fr.Floor = c.grants.Floor()
	}
	return fr
}

// reportJump logs a refused epoch jump at ERROR, at most once per
// interval with the count since the last line: a forged message cannot
// flood the log.
func (c *core) reportJump(now time.Time, from string, epoch uint64) {
	r := &c.jumps
	r.count++
	if epoch > r.highest {
		r.highest, r.from = epoch, from
	}
	if now.Before(r.next) {
		return
	}
	c.log.Error("refused a peer message whose epoch jumps far above this node's: not adopted (a forged message, or a node far out of date)",
		"highest_refused", r.highest, "from", clipName(r.from), "this_epoch", c.epochs.Epoch(), "count", r.count)
	r.next, r.count, r.highest = now.Add(jumpReportInterval), 0, 0
}

// clipName shortens a peer-chosen name before it reaches the log.
func clipName(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
