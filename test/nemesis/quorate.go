//go:build nemesis

package nemesis

import (
	"slices"
	"strings"
	"time"

	"github.com/tenurehq/tenure/test/nemesis/check"
)

// connectedDelay is the longest mean delay under which a link still
// counts as connected when the harness decides whether a fault leaves a
// majority of the voters connected: a WAN's round trip. Longer delays
// make a slow network, which tenure does not promise to ride out
// (docs/GUARANTEES.md, "What tenure does not promise").
const connectedDelay = 100 * time.Millisecond

// Quorate returns the largest set of voters among up (running, not
// paused, disk writable) that p leaves connected with each other, every
// packet between any two of them delivered (a delay of at most
// connectedDelay counts as delivered), if it is a majority of voters;
// nil otherwise. It is sorted.
func Quorate(voters, up []string, p Partition) []string {
	var cand []string
	for _, v := range voters {
		if slices.Contains(up, v) {
			cand = append(cand, v)
		}
	}
	if len(cand) > 16 { // no harness cluster has that many voters
		return nil
	}
	var best []string
	for set := uint32(1); set < 1<<len(cand); set++ {
		var s []string
		for i, v := range cand {
			if set&(1<<i) != 0 {
				s = append(s, v)
			}
		}
		if len(s) > len(best) && connected(p, s) {
			best = s
		}
	}
	if 2*len(best) <= len(voters) {
		return nil
	}
	slices.Sort(best)
	return best
}

// connected reports whether p lets every packet between any two of nodes
// through, both ways.
func connected(p Partition, nodes []string) bool {
	for _, r := range p.Rules {
		if r.Delay && p.Delay <= connectedDelay {
			continue
		}
		if slices.Contains(nodes, r.On) && slices.Contains(nodes, r.From) {
			return false
		}
	}
	return true
}

// rosterVoters returns the voters of the roster the leader (or, failing
// that, any running agent) reports, or nil when none answers with one.
func (c *Cluster) rosterVoters(leader *Node) []string {
	for _, n := range append([]*Node{leader}, c.nodes...) {
		if n == nil || !n.Up() {
			continue
		}
		if st, err := n.Status(); err == nil && st.Roster != nil && len(st.Roster.Voters) > 0 {
			return st.Roster.Voters
		}
	}
	c.cfg.Logger.Warn("no agent reported its roster: liveness is judged after the heal only")
	return nil
}

// markQuorate records, for the faults just made (the partition on, the
// agents down, paused or with a full disk, which votes only where no
// write is needed), whether they leave a majority of voters up and
// connected (check.EventQuorate): liveness is then judged during the
// fault too.
func (c *Cluster) markQuorate(voters []string) error {
	var up []string
	for _, n := range c.nodes {
		if n.Up() && !n.diskFull {
			up = append(up, n.Name)
		}
	}
	set := Quorate(voters, up, c.partition)
	if set == nil {
		return nil
	}
	_, err := c.events.Record(check.EventQuorate, set, "of voters "+strings.Join(voters, " "))
	return err
}
