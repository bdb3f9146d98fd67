package check

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// MinStale is the shortest stretch a Report lists as Stale: a follower
// learns of a hand-over from the new leader's announcement, a round trip
// after the term begins, and of a step-down at once, so stretches under it
// are the ordinary time a term takes to pass from one node to the next.
const MinStale = time.Second

// Stale is a follower that went on naming a leader after that leader's
// term had ended (the last instant the leader believed its lease valid):
// its status, watchers and leader-changed hooks pointed at a node that no
// longer led. The mirror of a Blip. A follower learns of an end from the
// leader's step-down or its successor's announcement; when neither
// reaches it, only its own timers end the naming.
type Stale struct {
	At     int64         `json:"t"`      // the term's end, or when the follower named it if later
	Node   string        `json:"node"`   // the follower
	Leader string        `json:"leader"` // the leader it named
	Epoch  uint64        `json:"epoch"`  // the leader's term
	For    time.Duration `json:"for_ns"` // how long it named it after At
	// Faulted says a fault was on at At (as for Blip).
	Faulted bool `json:"faulted,omitempty"`
}

// termEnds is, for each term with an interval in iv, the end of its last.
func termEnds(iv []Interval) map[term]int64 {
	ends := map[term]int64{}
	for _, in := range iv {
		k := term{in.Node, in.Epoch}
		ends[k] = max(ends[k], in.End)
	}
	return ends
}

// StaleViews finds, in views (sorted by T), every stretch in which a node
// named another node's term after it had ended, from the intervals iv;
// a stretch ends at the node's next view, at a kill, stop, pause or
// start of its agent (events, sorted by T), or at the run's end. Terms
// with no interval, and stretches shorter than minStale, are left out.
func StaleViews(views []View, iv []Interval, events []Event, end int64, minStale time.Duration) []Stale {
	termEnd := termEnds(iv)
	byNode := map[string][]View{}
	for _, v := range views {
		byNode[v.Node] = append(byNode[v.Node], v)
	}
	var out []Stale
	for node, vs := range byNode {
		for i := 0; i < len(vs); i++ {
			v := vs[i]
			if v.Leader == "" || v.Leader == node {
				continue
			}
			j := i + 1 // the views that name the same term are one stretch
			for j < len(vs) && vs[j].Leader == v.Leader && vs[j].Epoch == v.Epoch {
				j++
			}
			until := end
			if j < len(vs) {
				until = min(until, vs[j].T)
			}
			until = min(until, silenced(events, node, v.T))
			i = j - 1
			te, ok := termEnd[term{v.Leader, v.Epoch}]
			if !ok {
				continue
			}
			from := max(te, v.T)
			if d := time.Duration(until - from); d >= minStale && d > 0 {
				out = append(out, Stale{At: from, Node: node, Leader: v.Leader, Epoch: v.Epoch, For: d,
					Faulted: faultOn(events, from)})
			}
		}
	}
	slices.SortFunc(out, func(a, b Stale) int { return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.Node, b.Node)) })
	return out
}

// silenced is the first kill, stop, pause, pause-host or start of node's
// agent after t, or the largest time if none: from then its watch stream
// says nothing, or starts anew.
func silenced(events []Event, node string, t int64) int64 {
	for _, e := range events {
		if e.T <= t || !slices.Contains(e.Nodes, node) {
			continue
		}
		switch e.Kind {
		case EventKill, EventStop, EventPause, EventPauseHost, EventStart:
			return e.T
		}
	}
	return int64(^uint64(0) >> 1)
}

// String describes the stretch for the report.
func (s Stale) String() string {
	out := fmt.Sprintf("%s named %s (epoch %d) for %v after its term ended at %s", s.Node, s.Leader, s.Epoch,
		s.For.Round(time.Millisecond), stamp(s.At))
	if s.Faulted {
		out += " (under a fault)"
	}
	return out
}
