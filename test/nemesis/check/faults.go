package check

import (
	"fmt"
	"slices"
	"time"
)

// faultKinds are the events that begin a fault: after one, a fault is on
// until the next heal.
var faultKinds = []string{EventPartition, EventKill, EventWipe, EventPause, EventPauseHost, EventDiskFull}

// spanKinds begin a FaultSpan: the faults, and an operator's acts (with
// no fault under them, the act is the span's first event).
var spanKinds = append(slices.Clip(faultKinds), EventStop, EventOperator, EventQuorate)

// FaultSpan is one fault or operator's act of the run, from its first
// event after a heal to the heal that ended it, and how long no node held
// a lease in it: the heal-time liveness check cannot see a term lost
// during a fault and another won before its heal.
type FaultSpan struct {
	From int64 `json:"from"` // its first event after a heal, Unix nanoseconds
	// To is the heal that ended the fault, or the run's end.
	To int64 `json:"to"`
	// What is that first event's kind and detail ("partition: halves:
	// h1 h2 | h3 h4 h5").
	What string `json:"what"`
	// Quorate, when not 0, is when the harness recorded that the fault
	// left a majority of the voters up and connected with each other
	// (EventQuorate): from then to To, I5 judges the span.
	Quorate int64 `json:"quorate,omitempty"`
	// Leaderless is the longest stretch of [From, To) in which no node
	// held a believed-valid lease (one still running at To counts up to
	// To).
	Leaderless time.Duration `json:"leaderless_ns"`
}

// FaultSpans finds the faults and operator's acts of a run (events sorted
// by T) and measures each against the believed-valid intervals iv (sorted
// by Start, as Beliefs returns them); end is the run's end. A fault still
// on at the end is measured to it.
func FaultSpans(iv []Interval, events []Event, end int64) []FaultSpan {
	var out []FaultSpan
	var open *FaultSpan
	closeAt := func(t int64) {
		if open == nil {
			return
		}
		open.To = min(t, end)
		open.Leaderless = longest(leaderless(iv, open.From, open.To))
		out = append(out, *open)
		open = nil
	}
	for _, e := range events {
		if e.T >= end {
			break
		}
		switch {
		case e.Kind == EventHeal:
			closeAt(e.T)
		case open == nil && slices.Contains(spanKinds, e.Kind):
			open = &FaultSpan{From: e.T, What: e.Kind}
			if e.Detail != "" {
				open.What += ": " + e.Detail
			}
		}
		if e.Kind == EventQuorate && open != nil && open.Quorate == 0 {
			open.Quorate = e.T
		}
	}
	closeAt(end)
	return out
}

// gap is a stretch [from, to) in which no node held a believed-valid
// lease.
type gap struct{ from, to int64 }

// leaderless returns the gaps of [from, to) that no interval of iv
// (sorted by Start) covers. A gap that reaches to may go on after it.
func leaderless(iv []Interval, from, to int64) []gap {
	var out []gap
	at := from // everything before at is covered, or a gap already listed
	for _, in := range iv {
		if at >= to {
			break
		}
		if in.End <= at {
			continue
		}
		if in.Start > at {
			out = append(out, gap{at, min(in.Start, to)})
		}
		at = max(at, in.End)
	}
	if at < to {
		out = append(out, gap{at, to})
	}
	return out
}

func longest(gaps []gap) time.Duration {
	var d time.Duration
	for _, g := range gaps {
		d = max(d, time.Duration(g.to-g.from))
	}
	return d
}

// String is the span for a reader: what it was, how long, and how long
// at most no node held a lease in it.
func (f FaultSpan) String() string {
	s := fmt.Sprintf("%s, %v from %s: at most %v without a lease", f.What,
		time.Duration(f.To-f.From).Round(time.Millisecond), stamp(f.From), f.Leaderless.Round(time.Millisecond))
	if f.Quorate != 0 {
		s += " (a majority of the voters connected)"
	}
	return s
}
