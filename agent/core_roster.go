package agent

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tenurehq/tenure/leasing"
)

// rosterFetch is a node's asking for the roster (maybeFetchRoster).
type rosterFetch struct {
	at   time.Time // next fetch
	sent int       // fetches sent: picks whom to ask next
}

// rosterFetchInterval is how often a node without a roster asks a member of
// an established cluster for it.
const rosterFetchInterval = time.Second

// maybeFetchRoster asks members of the cluster for their roster when this
// node has none (an observer, or a node started without --expect), or when
// a member advertises a later step than this node's (a later version, or
// a later term's step of its version). Each interval it asks
// rosterFetchFanout of the members that qualify, the next ones in turn
// from an offset of its own (its node ID), so one it cannot reach stalls
// it for one interval only and a fleet that starts together does not ask
// the same few: when every node started from the first in name order, 95
// observers asked the five voters, the busiest members then, one after
// the other, and the highest node learned the roster 2.3 s after it
// joined. It asks the members that are not voters of their roster first.
func (c *core) maybeFetchRoster(now time.Time) {
	if !c.quorumMode() || now.Before(c.fetch.at) {
		return
	}
	mine := c.roster()
	// This runs on every tick: find the members worth asking first, and
	// order only those (by name, so the rotation below is stable).
	var from []memberView
	for _, mv := range c.live {
		if mv.Cluster != "" && mv.Node != c.cfg.Self && (mine.IsZero() || mv.newerRoster(mine)) {
			from = append(from, mv)
		}
	}
	if len(from) == 0 {
		return
	}
	// Spare the voters while other members can answer: every election
	// waits for them. In a fleet that starts together the voters hold the
	// roster first, and each of five answered about 34 fetches while 100
	// agents started, each on a new TLS connection. Once this node has
	// made as many fetches (since it started) as there are other holders,
	// having asked each of them in turn, it asks the voters too.
	if others := slices.DeleteFunc(slices.Clone(from), func(mv memberView) bool { return mv.Seated }); len(others) > c.fetch.sent {
		from = others
	}
	slices.SortFunc(from, func(a, b memberView) int { return strings.Compare(a.Name, b.Name) })
	c.fetch.at = now.Add(rosterFetchInterval)
	start := int(c.cfg.Self.ID % uint64(len(from)))
	for range min(rosterFetchFanout, len(from)) {
		mv := from[(start+c.fetch.sent)%len(from)]
		c.fetch.sent++
		c.log.Debug("fetching the roster", "from", mv.Name)
		c.out = append(c.out, outMsg{to: mv.Node, env: envelope{RosterFetch: true}})
	}
}

// rosterFetchFanout is how many members a roster fetch asks at once. In a
// fleet that starts together the first members to have the roster are
// the voters, the members every election waits for; asking three at once
// made each of five voters answer about 45 fetches while 100 agents
// started, each on a new peer connection (TLS handshakes were the voters'
// largest cost then), and the fleet agreed no sooner for it.
const rosterFetchFanout = 1

// adoptRoster stores a roster learned from a peer: when this node has none,
// or a later one of its cluster (every stored roster came from a leader's
// change step, and a joint one is used only with both majorities, so a
// later roster is safe to campaign under). A roster that names this node,
// other than the bootstrap roster it pledged to, means a lost data dir (or
// a bootstrap it took no part in): the node may have granted before, so it
// holds its vote (mayHaveGranted).
func (c *core) adoptRoster(now time.Time, r leasing.Roster) {
	if r.IsZero() || r.ClusterID == "" || len(r.Voters) == 0 {
		return
	}
	if !c.roster().IsZero() {
		c.adoptNewer(now, r) // also reports a diverged roster
		return
	}
	if err := c.rosters.Save(r); err != nil {
		c.storageFailed(now, fmt.Errorf("store the roster learned: %w", err))
		return
	}
	if c.mayHaveGranted(r) {
		c.becomeAmnesiac(now, "learned a roster naming this node from a peer: "+r.String())
		return
	}
	c.log.Info("learned the voter roster", "roster", r.String())
}

// mayHaveGranted reports whether r, the first roster this node stores
// (fetched, or pushed by a leader), means that this voter may have
// granted leases it no longer remembers: r names it, and is not the
// bootstrap roster it pledged to, so its data dir was lost (or it took no
// part in the bootstrap). It must then hold its vote (core.amnesia).
func (c *core) mayHaveGranted(r leasing.Roster) bool {
	return r.Contains(toLeasing(c.cfg.Self)) && c.grants != nil && !c.pledgedTo(r)
}

func sortedNames(m map[string]memberView) []string {
	out := make([]string, 0, len(m))
	for name := range m {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
