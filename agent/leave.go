package agent

import (
	"context"
	"errors"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// leaveBudget bounds how long a stopping voter waits for the leader to
// take it out of the roster.
const leaveBudget = 5 * time.Second

// leaveRetry is how often a stopping voter asks again.
const leaveRetry = 200 * time.Millisecond

// leaveRoster asks the leader, before this node leaves gossip, to take it
// out of the roster (removal before leave), and waits until the leader
// answers that it is no longer a voter, or until leaveBudget or ctx runs
// out. While it waits it still votes, so the change (which needs a majority
// of the old voter set) can commit even when this node is one of the last
// voters: a roster of two voters that lost one without it would count on a
// voter that is gone. The roster's only voter hands its seat to another
// node that may vote (the leader after it promotes that node in its
// place); a node that is not a voter, or the only voter with nobody to
// take its seat, leaves at once.
func (a *Agent) leaveRoster(ctx context.Context) {
	if a.cfg.Consistency != Quorum || !a.cfg.Voter {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, leaveBudget)
	defer cancel()
	start := time.Now()
	for attempt := 0; ; attempt++ {
		var voter, sole bool
		if err := a.do(ctx, func() {
			r := a.core.roster()
			voter, sole = rosterHas(r, a.cfg.Name), len(r.Members()) <= 1 && !a.core.successorExists()
		}); err != nil {
			return
		}
		if !voter || sole {
			if attempt > 0 {
				a.log.Info("left the voter roster", "took", time.Since(start).Round(time.Millisecond))
			}
			return
		}
		err := a.ForceLeave(ctx, a.cfg.Name)
		if errors.Is(err, rpc.ErrNotFound) {
			a.log.Info("left the voter roster", "took", time.Since(start).Round(time.Millisecond))
			return
		}
		if errors.Is(err, rpc.ErrInvalidArgument) {
			a.log.Warn("stopping while still a voter: this node still leads (no other node took over), and a leader cannot remove itself", "err", err)
			return
		}
		if err != nil {
			a.log.Debug("asking the leader to take this voter out of the roster", "err", err)
		}
		select {
		case <-ctx.Done():
			a.log.Warn("stopping while still a voter: the leader did not take this node out of the roster in time; it will once gossip reports it left",
				"waited", time.Since(start).Round(time.Millisecond))
			return
		case <-time.After(leaveRetry):
		}
	}
}
