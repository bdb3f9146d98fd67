package check

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// HandOver is an operator's act that moved leadership on purpose (a
// graceful stop or a drain of the node that held the lease, a transfer, a
// resign) and how long after it the next node held a lease: what the act
// costs the cluster, measured from the agents' own journals.
type HandOver struct {
	At   int64  `json:"t"`    // the act, Unix nanoseconds
	Act  string `json:"act"`  // "stop" or the command line, "tenure drain"
	From string `json:"from"` // the node that held a lease at the act
	// To is the node of the next term after the act: another node, or
	// From again in a later epoch (a resign whose hold ran out before
	// another node could lead); "" if none began before the end.
	To string `json:"to,omitempty"`
	// Gap is the time from the act to To's lease; with no To, to the end.
	Gap time.Duration `json:"gap_ns"`
	// LeaseLeft is how long From's lease still ran at the act, as From
	// believed it: a hand-over that waits for the old lease takes longer.
	LeaseLeft time.Duration `json:"lease_left_ns"`
	// Faulted says a fault was on at the act: a partition, a kill, a
	// wipe or a pause after the last heal.
	Faulted bool `json:"faulted,omitempty"`
	// Refused says the agent refused the command (an EventRefused of the
	// same node and command line followed it).
	Refused bool `json:"refused,omitempty"`
	// Back, when not 0, is how long after the act From led again, taking
	// the term back from To (see takenBack): the hand-over was undone.
	Back time.Duration `json:"back_ns,omitempty"`
}

// HandOvers measures every act in events (sorted by T) that met a node
// holding a lease: a stop or a drain of that node, a transfer or a resign
// asked of any. end is the run's end.
func HandOvers(iv []Interval, events []Event, end int64) []HandOver {
	var out []HandOver
	for _, e := range events {
		act, anyNode := handOverAct(e)
		if act == "" || e.T >= end {
			continue
		}
		held, ok := holder(iv, e.T)
		if !ok || (!anyNode && !slices.Contains(e.Nodes, held.Node)) {
			continue
		}
		h := HandOver{At: e.T, Act: act, From: held.Node, Gap: time.Duration(end - e.T),
			LeaseLeft: time.Duration(held.Until - e.T), Faulted: faultOn(events, e.T), Refused: refused(events, e)}
		for _, in := range iv {
			if in.Start >= e.T && in.Start < end && (in.Node != held.Node || in.Epoch != held.Epoch) {
				h.To, h.Gap = in.Node, time.Duration(in.Start-e.T)
				if in.Node != held.Node {
					h.Back = takenBack(iv, events, e.T, end, held.Node, in)
				}
				break // sorted by Start
			}
		}
		out = append(out, h)
	}
	return out
}

// takenBack is how long after the act at t the node from, which handed
// its term over, led again in the term right after to's (the successor's
// first interval after the act), when to ended its term early (its
// journal's end record at least earlyEnd before its lease's end, so not a
// lease that ran out) and nothing happened after the act that may end a
// term or let from lead again: no fault, restart, stop or operator's act
// (disturbs). That is a preemption by the node that handed over, which
// the agent promises never to do (docs/GUARANTEES.md: a resign, a drain,
// a transfer move leadership once). Only a lead before end (the run's)
// counts: the harness stops every agent after it, and a stop hands over.
// 0 otherwise.
func takenBack(iv []Interval, events []Event, t, end int64, from string, to Interval) time.Duration {
	last := to
	for _, in := range iv {
		if in.Node == to.Node && in.Epoch == to.Epoch && in.End > last.End {
			last = in
		}
	}
	if last.CutBy != CutEnd || last.Until-last.End < int64(earlyEnd) {
		return 0
	}
	for _, in := range iv { // sorted by Start
		if in.Start < last.End || in.Node == to.Node && in.Epoch == to.Epoch {
			continue
		}
		if in.Node != from || in.Start >= end || disturbed(events, t, in.Start) {
			return 0
		}
		return time.Duration(in.Start - t)
	}
	return 0
}

// earlyEnd is how long before its lease's end a term must end to count as
// ended by its leader rather than run out: more than the agent's tick.
const earlyEnd = 100 * time.Millisecond

// disturbs are the events after which a node may lead again without
// having taken a term back: faults, restarts, stops and operators' acts.
var disturbs = []string{EventKill, EventStart, EventStop, EventPause, EventPauseHost, EventPartition,
	EventWipe, EventDiskFull, EventDiskFreed, EventOperator}

// disturbed reports whether an event of disturbs happened in (from, to).
func disturbed(events []Event, from, to int64) bool {
	return happened(events, from, to, func(e Event) bool { return slices.Contains(disturbs, e.Kind) })
}

// refused reports whether the agent refused the operator's command of
// act: a refusal of the same node and command line follows it.
func refused(events []Event, act Event) bool {
	for _, e := range events {
		if e.T >= act.T && e.Kind == EventRefused && e.Detail == act.Detail && slices.Equal(e.Nodes, act.Nodes) {
			return true
		}
	}
	return false
}

// CheckHandOvers judges the hand-overs made with no fault on that the
// agent did not refuse: each must give the next node its lease before
// the old lease would have run out (as From believed it at the act), and
// must not be undone (HandOver.Back). One that waited for the old lease
// (its release lost or never sent, the successor held back) fails, as
// does one whose node took the term back. Under a fault the release or
// the successor's requests may not reach the voters it needs, or the
// named successor may be dead or frozen, and waiting for the old lease is
// then allowed: those are measured only.
func CheckHandOvers(hs []HandOver) Verdict {
	v := verdict{name: NameHandOver}
	judged, others := 0, 0
	var longest time.Duration
	for _, h := range hs {
		if h.Faulted || h.Refused {
			others++
			continue
		}
		judged++
		switch {
		case h.To == "":
			v.failf("%s at %s: no node held a lease after it, in the %v to the end (%s's lease had %v left)",
				h.Act, stamp(h.At), h.Gap, h.From, h.LeaseLeft)
		case h.Gap >= h.LeaseLeft:
			v.failf("%s at %s: %s held the next lease %v later, when %s's lease had %v left: it waited for the old lease",
				h.Act, stamp(h.At), h.To, h.Gap, h.From, h.LeaseLeft)
		case h.Back > 0:
			v.failf("%s at %s: undone: %s led %v later, then %s again %v after the act, ending %s's term with no fault or act between",
				h.Act, stamp(h.At), h.To, h.Gap, h.From, h.Back, h.To)
		default:
			longest = max(longest, h.Gap)
		}
	}
	return v.done(fmt.Sprintf("%d hand-overs with no fault on, each before the old lease ran out (the longest %v) and none undone; %d under a fault or refused, measured only",
		judged, longest.Round(time.Millisecond), others))
}

// handOverAct names the act of e that hands leadership over, or "" for
// none; anyNode says it moves leadership whichever node it was asked of.
func handOverAct(e Event) (act string, anyNode bool) {
	switch {
	case e.Kind == EventStop:
		return "stop", false
	case e.Kind != EventOperator:
		return "", false
	case e.Detail == "tenure drain":
		return e.Detail, false
	case strings.HasPrefix(e.Detail, "tenure transfer"), strings.HasPrefix(e.Detail, "tenure resign"):
		return e.Detail, true
	}
	return "", false
}

// holder is the believed-valid interval that holds t, if any.
func holder(iv []Interval, t int64) (Interval, bool) {
	for _, in := range iv {
		if in.Start > t {
			break
		}
		if t < in.End {
			return in, true
		}
	}
	return Interval{}, false
}

func (h HandOver) String() string {
	to := h.To
	switch to {
	case "":
		to = "nobody"
	case h.From:
		to += " (again, a later term)"
	}
	s := fmt.Sprintf("%s: %s → %s in %v", h.Act, h.From, to, h.Gap.Round(time.Millisecond))
	if h.Faulted {
		s += " (under a fault)"
	}
	if h.Refused {
		s += " (refused)"
	}
	if h.Back > 0 {
		s += fmt.Sprintf(" (undone: %s again after %v)", h.From, h.Back.Round(time.Millisecond))
	}
	return s
}
