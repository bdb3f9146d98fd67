package check

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// CheckOneLease is I1: no two different nodes' believed-valid intervals
// overlap (iv as Beliefs returns it). Each overlap is reported with both
// nodes, their epochs and its length.
func CheckOneLease(iv []Interval) Verdict {
	v := verdict{name: NameOneLease}
	for i, a := range iv {
		for _, b := range iv[i+1:] {
			if b.Start >= a.End {
				break
			}
			if a.Node != b.Node {
				v.failf("%s (epoch %d) and %s (epoch %d) both believed they held a valid lease for %v from %s",
					a.Node, a.Epoch, b.Node, b.Epoch, time.Duration(min(a.End, b.End)-b.Start), stamp(b.Start))
			}
		}
	}
	return v.done(fmt.Sprintf("%d believed-valid intervals, no two nodes' overlap", len(iv)))
}

// CheckEpochs is I2 over the journals (sorted by T): no epoch is led twice,
// by one node or two; leads ordered by time have strictly increasing
// epochs, across restarts; and no node extends a term it did not lead.
func CheckEpochs(journal []JournalRecord) Verdict {
	v := verdict{name: NameEpochs}
	leads := make(map[uint64]JournalRecord)
	led := make(map[term]bool)
	var highest JournalRecord
	n := 0
	for _, r := range journal {
		switch r.Event {
		case JournalLead:
			n++
			checkLead(&v, r, leads, highest)
			if highest.Node == "" || r.Epoch > highest.Epoch {
				highest = r
			}
			led[term{r.Node, r.Epoch}] = true
		case JournalExtend:
			if !led[term{r.Node, r.Epoch}] {
				v.failf("%s extended epoch %d at %s without having led it", r.Node, r.Epoch, stamp(r.T))
			}
		}
	}
	return v.done(fmt.Sprintf("%d terms, epochs unique and increasing", n))
}

// checkLead checks one lead record against the earlier ones.
func checkLead(v *verdict, r JournalRecord, leads map[uint64]JournalRecord, highest JournalRecord) {
	if prev, ok := leads[r.Epoch]; ok {
		v.failf("epoch %d led twice: by %s at %s and by %s at %s", r.Epoch, prev.Node, stamp(prev.T), r.Node, stamp(r.T))
	} else {
		leads[r.Epoch] = r
	}
	if highest.Node != "" && r.Epoch < highest.Epoch {
		v.failf("%s led epoch %d at %s, after %s led epoch %d at %s", r.Node, r.Epoch, stamp(r.T),
			highest.Node, highest.Epoch, stamp(highest.T))
	}
}

// CheckLiveness is I5: after every heal before the run's end, a node must
// hold a valid lease within bound (the agents' TTL plus the election
// bound). A heal followed by no lease before end fails only if at least
// bound passed before end. During a fault that left a majority of the
// voters up and connected (a FaultSpan with Quorate, spans as FaultSpans
// returns them), no stretch from then to the heal may pass without a
// lease for longer than bound: the promise of a leader within a TTL plus
// an election holds while a majority is connected, not only after the
// heal. It returns the time to a lease after each heal (see
// Report.Liveness). events must be sorted by T; end is the run's end.
func CheckLiveness(iv []Interval, events []Event, spans []FaultSpan, bound time.Duration, end int64) (Verdict, []time.Duration) {
	v := verdict{name: NameLiveness}
	quorate := checkQuorate(&v, iv, spans, bound)
	var waits []time.Duration
	for _, e := range events {
		if e.Kind != EventHeal || e.T >= end {
			continue
		}
		at, ok := firstHeld(iv, e.T)
		if !ok || at >= end {
			waits = append(waits, time.Duration(end-e.T))
			if time.Duration(end-e.T) >= bound {
				v.failf("no node held a valid lease in the %v from the heal at %s to the end (bound %v)",
					time.Duration(end-e.T), stamp(e.T), bound)
			}
			continue
		}
		wait := time.Duration(at - e.T)
		waits = append(waits, wait)
		if wait > bound {
			v.failf("the first valid lease after the heal at %s came %v later (bound %v)", stamp(e.T), wait, bound)
		}
	}
	return v.done(livenessSummary(waits, quorate, bound)), waits
}

// checkQuorate judges the spans with Quorate set: each stretch without a
// lease from then to the span's end must be at most bound. It returns how
// many it judged and the longest such stretch.
func checkQuorate(v *verdict, iv []Interval, spans []FaultSpan, bound time.Duration) quorateSummary {
	var q quorateSummary
	for _, s := range spans {
		if s.Quorate == 0 {
			continue
		}
		q.spans++
		for _, g := range leaderless(iv, s.Quorate, s.To) {
			d := time.Duration(g.to - g.from)
			q.longest = max(q.longest, d)
			if d > bound {
				v.failf("no node held a valid lease for %v from %s, during a fault that left a majority of the voters connected (%s, from %s; bound %v)",
					d, stamp(g.from), s.What, stamp(s.From), bound)
			}
		}
	}
	return q
}

// quorateSummary is what checkQuorate judged.
type quorateSummary struct {
	spans   int
	longest time.Duration
}

// firstHeld returns the first instant at or after t at which some node is
// inside a believed-valid interval.
func firstHeld(iv []Interval, t int64) (int64, bool) {
	first, found := int64(0), false
	for _, in := range iv {
		if in.End <= t {
			continue
		}
		at := max(in.Start, t)
		if !found || at < first {
			first, found = at, true
		}
		if in.Start > t { // sorted by Start: no later interval starts earlier
			break
		}
	}
	return first, found
}

func livenessSummary(waits []time.Duration, q quorateSummary, bound time.Duration) string {
	s := "no heals before the end"
	if len(waits) > 0 {
		s = fmt.Sprintf("%d heals, a leader after at most %v", len(waits), slices.Max(waits))
	}
	if q.spans > 0 {
		s += fmt.Sprintf("; %d faults or acts with a majority connected, at most %v without a lease in them", q.spans, q.longest)
	}
	return s + fmt.Sprintf(" (bound %v)", bound)
}

// runEnd is the instant liveness stops being measured: the end event, or
// without one the latest time any record carries.
func runEnd(run *Run) int64 {
	var end int64
	for _, e := range run.Events {
		if e.Kind == EventEnd {
			return e.T
		}
		end = max(end, e.T)
	}
	for _, r := range run.Journal {
		end = max(end, r.T)
	}
	for _, o := range run.History {
		end = max(end, o.Invoke, o.Return)
	}
	return end
}

// stamp renders a Unix-nanosecond instant as UTC with microseconds, and
// the raw value for grepping the files.
func stamp(t int64) string {
	return fmt.Sprintf("%s (%d)", time.Unix(0, t).UTC().Format("15:04:05.000000"), t)
}

// sortedBy sorts a copy of s by key.
func sortedBy[T any](s []T, key func(T) int64) []T {
	out := slices.Clone(s)
	slices.SortStableFunc(out, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
	return out
}
