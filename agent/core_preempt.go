package agent

import (
	"time"

	"github.com/tenurehq/tenure/bully"
)

// Preemption: a leader yields its term to a higher node that kept claiming
// it (with --preempt), but first asks that node whether it can take the
// term now, as before a transfer or a resign (core.canTake and the agent's
// check of the voters, Agent.serveCanTake). A claim says the claimant
// reached a majority of the voters when it last probed them, which may be
// an announce interval and a probe's budget before: cut off from the
// voters since, it could not win the lease round, and the cluster had no
// leader for the transfer window, then elected a node nobody named
// (TestPreemptionAsksTheClaimant). The election machine asks
// (bully.Config.ConfirmPreempt, Ready.Preempt); the driver takes the
// question (takePreemptAsk), asks the node off the driver
// (Agent.askPreempt) and gives the answer back (preemptAnswered).

// takePreemptAsk returns, once, the higher node this leader would yield its
// term to if it can take it; ok is false when there is none to ask.
func (c *core) takePreemptAsk() (n bully.Node, ok bool) {
	n, c.preempt = c.preempt, bully.Node{}
	return n, !n.IsZero()
}

// preemptAnswered gives the election the answer of n, the higher node this
// leader asked before yielding to it: nil when n can take the term, else
// why not (it refused, or did not answer). On a refusal the leader keeps
// its term, and yields to n only once n has claimed it for another
// stabilisation delay.
func (c *core) preemptAnswered(now time.Time, n bully.Node, err error) {
	if err != nil && c.leading() {
		c.log.Warn("a higher node claimed the term but cannot take it now; keeping the term",
			"claimant", n.Name, "epoch", c.lease.epoch, "err", err)
	}
	c.m.PreemptAnswered(now, n, err == nil)
	c.process(now)
}
