package check

import (
	"cmp"
	"slices"
)

// Interval is a span [Start, End) in Unix nanoseconds during which Node
// believed it held a valid lease for the term Epoch.
type Interval struct {
	Node  string
	Epoch uint64
	Start int64
	End   int64
	// Until is the lease's end as the node believed it when the interval
	// began its last stretch: End == Until unless the interval was cut
	// short by the term's end record, a restart or a kill.
	Until int64
	// CutBy says what ended the interval before Until: CutEnd, CutStart,
	// CutKill, or "" when it ran to Until.
	CutBy string
}

// What cut an interval short (Interval.CutBy).
const (
	CutEnd   = "end"   // the term's end record
	CutStart = "start" // the node's agent started again
	CutKill  = "kill"  // the harness killed the node's agent
)

// Beliefs reconstructs every node's believed-valid intervals from the
// journals and the harness's kill events. Each lead or extend record opens
// a segment [T, Until), cut at the first of: an end record of the same
// node and epoch at or after T, the node's next start record after T, a
// kill of the node at or after T. The segments of one node and epoch are
// merged. The inputs need not be sorted; the result is sorted by Start,
// then node.
func Beliefs(journal []JournalRecord, events []Event) []Interval {
	byNode := make(map[string][]JournalRecord)
	for _, r := range journal {
		byNode[r.Node] = append(byNode[r.Node], r)
	}
	kills := eventTimes(events, EventKill)
	var out []Interval
	for node, recs := range byNode {
		out = append(out, nodeBeliefs(recs, kills[node])...)
	}
	slices.SortFunc(out, func(a, b Interval) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.Node, b.Node), cmp.Compare(a.Epoch, b.Epoch))
	})
	return out
}

// eventTimes returns, per node, the sorted times of its events of kind.
func eventTimes(events []Event, kind string) map[string][]int64 {
	out := make(map[string][]int64)
	for _, e := range events {
		if e.Kind == kind {
			for _, n := range e.Nodes {
				out[n] = append(out[n], e.T)
			}
		}
	}
	for _, ts := range out {
		slices.Sort(ts)
	}
	return out
}

// nodeBeliefs turns one node's journal into merged intervals.
func nodeBeliefs(recs []JournalRecord, kills []int64) []Interval {
	var starts []int64
	ends := make(map[uint64][]int64)
	for _, r := range recs {
		switch r.Event {
		case JournalStart:
			starts = append(starts, r.T)
		case JournalEnd:
			ends[r.Epoch] = append(ends[r.Epoch], r.T)
		}
	}
	slices.Sort(starts)
	for _, ts := range ends {
		slices.Sort(ts)
	}
	segs := make(map[uint64][]Interval)
	for _, r := range recs {
		if r.Event != JournalLead && r.Event != JournalExtend {
			continue
		}
		in := Interval{Node: r.Node, Epoch: r.Epoch, Start: r.T, End: r.Until, Until: r.Until}
		in.cut(firstAtOrAfter(ends[r.Epoch], r.T), CutEnd)
		in.cut(firstAtOrAfter(starts, r.T+1), CutStart)
		in.cut(firstAtOrAfter(kills, r.T), CutKill)
		if in.End > in.Start {
			segs[r.Epoch] = append(segs[r.Epoch], in)
		}
	}
	var out []Interval
	for _, s := range segs {
		out = append(out, merge(s)...)
	}
	return out
}

// cut ends the interval at t, if that is earlier, naming why.
func (in *Interval) cut(t int64, why string) {
	if t < in.End {
		in.End, in.CutBy = t, why
	}
}

// firstAtOrAfter returns the first of the sorted ts at or after t, or the
// largest int64 if there is none.
func firstAtOrAfter(ts []int64, t int64) int64 {
	i, _ := slices.BinarySearch(ts, t)
	if i == len(ts) {
		return 1<<63 - 1
	}
	return ts[i]
}

// merge joins overlapping or touching segments of one node and epoch.
func merge(segs []Interval) []Interval {
	slices.SortFunc(segs, func(a, b Interval) int { return cmp.Compare(a.Start, b.Start) })
	out := []Interval{segs[0]}
	for _, s := range segs[1:] {
		cur := &out[len(out)-1]
		switch {
		case s.Start > cur.End:
			out = append(out, s)
		case s.End > cur.End:
			cur.End, cur.Until, cur.CutBy = s.End, s.Until, s.CutBy
		case s.End == cur.End && s.Until > cur.Until:
			cur.Until, cur.CutBy = s.Until, s.CutBy
		}
	}
	return out
}

// term names one node's term.
type term struct {
	node  string
	epoch uint64
}

// termIndex holds each term's intervals, sorted by Start.
type termIndex map[term][]Interval

func indexTerms(iv []Interval) termIndex {
	idx := make(termIndex)
	for _, in := range iv {
		k := term{in.Node, in.Epoch}
		idx[k] = append(idx[k], in)
	}
	return idx
}

// lastBefore returns the latest-starting interval of node's term epoch
// that starts at or before t, if any: t is inside it when t < End.
func (idx termIndex) lastBefore(node string, epoch uint64, t int64) (Interval, bool) {
	ivs := idx[term{node, epoch}]
	i, _ := slices.BinarySearchFunc(ivs, t+1, func(in Interval, t int64) int { return cmp.Compare(in.Start, t) })
	if i == 0 {
		return Interval{}, false
	}
	return ivs[i-1], true
}
