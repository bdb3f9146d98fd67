//go:build nemesis

package nemesis

import (
	"fmt"
	"strings"
	"time"

	"github.com/tenurehq/tenure/internal/procgroup"
	"github.com/tenurehq/tenure/rpc"
)

// Leader is the node that says it leads, asked of every running agent
// (the one with the highest epoch if several say so), or nil.
func (c *Cluster) Leader() *Node {
	var best *Node
	var epoch uint64
	for _, n := range c.nodes {
		if !n.Up() {
			continue
		}
		if st, err := n.Status(); err == nil && st.IsLeader && st.Leader != nil && (best == nil || st.Leader.Epoch > epoch) {
			best, epoch = n, st.Leader.Epoch
		}
	}
	return best
}

// Stable reports "" when every running agent names the same leader, a
// running one that says it leads, and each counts every running agent as
// a live member; otherwise what is missing.
func (c *Cluster) Stable() string {
	var leader *rpc.LeaderInfo
	up := 0
	for _, n := range c.nodes {
		if n.Up() {
			up++
		}
	}
	var missing []string
	for _, n := range c.nodes {
		if !n.Up() {
			continue
		}
		st, err := n.Status()
		switch {
		case err != nil:
			missing = append(missing, fmt.Sprintf("%s: %v", n.Name, err))
		case st.Leader == nil:
			missing = append(missing, n.Name+" knows no leader")
		case leader != nil && *st.Leader != *leader:
			missing = append(missing, fmt.Sprintf("%s follows %s (epoch %d), another %s (epoch %d)",
				n.Name, st.Leader.Node, st.Leader.Epoch, leader.Node, leader.Epoch))
		case c.Node(st.Leader.Node) == nil || !c.Node(st.Leader.Node).Up():
			missing = append(missing, fmt.Sprintf("%s follows %s, which is down or paused", n.Name, st.Leader.Node))
		case st.Leader.Node == n.Name && !st.IsLeader:
			missing = append(missing, n.Name+" is named leader but does not lead")
		case st.Members < up:
			missing = append(missing, fmt.Sprintf("%s sees %d live members of %d running", n.Name, st.Members, up))
		}
		if err == nil && leader == nil && st.Leader != nil {
			leader = st.Leader
		}
	}
	return strings.Join(missing, "; ")
}

// WaitStable polls Stable every 100 ms until it holds or d passes; it
// returns how long that took, and what was missing last if it never held.
func (c *Cluster) WaitStable(d time.Duration) (time.Duration, string) {
	start := time.Now()
	for {
		why := c.Stable()
		if why == "" {
			return time.Since(start), ""
		}
		if time.Since(start) > d {
			return time.Since(start), why
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitWriting waits up to d until n's `tenure run` has a child (the
// writer) and n's history grows, so a fault aimed at the leader finds its
// writer at work. It reports whether it saw that.
func (c *Cluster) WaitWriting(n *Node, d time.Duration) bool {
	from := fileSize(c.history(n))
	deadline := time.Now().Add(d)
	for {
		if len(procgroup.Children(n.run.Pid())) > 0 && fileSize(c.history(n)) > from {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Crashed lists the processes that exited though the harness did not stop
// them: agents, supervisors, the store.
func (c *Cluster) Crashed() []string {
	var out []string
	for _, n := range c.nodes {
		if n.agent != nil {
			if done, err := n.agent.Exited(); done {
				out = append(out, fmt.Sprintf("%s's agent exited: %v", n.Name, err))
			}
		}
		if n.run == nil {
			continue
		}
		if done, err := n.run.Exited(); done {
			out = append(out, fmt.Sprintf("%s's tenure run exited: %v", n.Name, err))
		}
	}
	if c.store == nil {
		return out
	}
	if done, err := c.store.Exited(); done {
		out = append(out, fmt.Sprintf("the store exited: %v", err))
	}
	return out
}
