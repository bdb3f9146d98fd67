package agent

import (
	"sort"
	"time"

	"github.com/tenurehq/tenure/leasing"
)

// rosterFetchInterval is how often a node without a roster asks a member of
// an established cluster for it.
const rosterFetchInterval = time.Second

// maybeBootstrap creates the first roster when this fresh voter sees exactly
// cfg.Expect fresh voters (itself included) and no member of an established
// cluster. Every node that sees the same set derives the same roster and
// cluster ID without talking; see docs/DESIGN.md for what --expect assumes.
func (c *core) maybeBootstrap() {
	if !c.quorumMode() || c.cfg.Expect == 0 || !c.cfg.Voter || !c.roster().IsZero() {
		return
	}
	var fresh []leasing.Node
	for _, mv := range c.live {
		if mv.Cluster != "" {
			return // an established cluster: wait to be admitted
		}
		if mv.Voter {
			fresh = append(fresh, toLeasing(mv.Node))
		}
	}
	if len(fresh) != c.cfg.Expect {
		return
	}
	sort.Slice(fresh, func(i, j int) bool { return fresh[i].Name < fresh[j].Name })
	r := leasing.Bootstrap(fresh)
	if err := c.rosters.Save(r); err != nil {
		c.failed = err
		return
	}
	c.log.Info("bootstrapped the voter roster", "roster", r.String())
}

// maybeFetchRoster asks a member of this node's future cluster for the
// roster, when this node has none (an observer, or a node started without
// --expect).
func (c *core) maybeFetchRoster(now time.Time) {
	if !c.quorumMode() || !c.roster().IsZero() || now.Before(c.fetchAt) {
		return
	}
	c.fetchAt = now.Add(rosterFetchInterval)
	for _, name := range sortedNames(c.live) {
		if mv := c.live[name]; mv.Cluster != "" && mv.Node != c.cfg.Self {
			c.out = append(c.out, outMsg{to: mv.Node, env: envelope{RosterFetch: true}})
			return
		}
	}
}

// adoptRoster stores a roster learned from a peer, when this node has none.
// A node that has a roster keeps it: rosters change only through the
// protocol's own rounds, never by hearsay. A roster that names this node
// comes from a bootstrap it raced (the others bootstrapped first) or from a
// lost data dir; either way the node may have granted before, so it holds
// its vote for one TTL (see core.amnesiac).
func (c *core) adoptRoster(now time.Time, r leasing.Roster) {
	if !c.roster().IsZero() || r.IsZero() || r.ClusterID == "" || len(r.Voters) == 0 {
		return
	}
	if err := c.rosters.Save(r); err != nil {
		c.failed = err
		return
	}
	if r.Contains(toLeasing(c.cfg.Self)) && c.grants != nil {
		c.amnesiac, c.holdEnd = true, now.Add(c.cfg.Lease.TTL)
		c.log.Warn("learned a roster naming this node from a peer: voting only after one lease TTL", "roster", r.String())
		return
	}
	c.log.Info("learned the voter roster", "roster", r.String())
}

func sortedNames(m map[string]memberView) []string {
	out := make([]string, 0, len(m))
	for name := range m {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
