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
	Act  string `json:"act"`          // "stop" or the command line, "tenure drain"
	From string `json:"from"`         // the node that held a lease at the act
	To   string `json:"to,omitempty"` // the next other node to hold one; "" if none did before the end
	// Gap is the time from the act to To's lease; with no To, to the end.
	Gap time.Duration `json:"gap_ns"`
	// Partitioned says a network fault was on at the act (a partition
	// event after the last heal).
	Partitioned bool `json:"partitioned,omitempty"`
}

// HandOvers measures every act in events (sorted by T) that met a node
// holding a lease: a stop or a drain of that node, a transfer or a resign
// asked of any. end is the run's end.
func HandOvers(iv []Interval, events []Event, end int64) []HandOver {
	var out []HandOver
	partitioned := false
	for _, e := range events {
		switch e.Kind {
		case EventPartition:
			partitioned = true
		case EventHeal:
			partitioned = false
		}
		act, anyNode := handOverAct(e)
		if act == "" || e.T >= end {
			continue
		}
		from, ok := holder(iv, e.T)
		if !ok || (!anyNode && !slices.Contains(e.Nodes, from)) {
			continue
		}
		h := HandOver{Act: act, From: from, Gap: time.Duration(end - e.T), Partitioned: partitioned}
		for _, in := range iv {
			if in.Node != from && in.Start >= e.T && in.Start < end {
				h.To, h.Gap = in.Node, time.Duration(in.Start-e.T)
				break // sorted by Start
			}
		}
		out = append(out, h)
	}
	return out
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

// holder is the node inside a believed-valid interval at t, if any.
func holder(iv []Interval, t int64) (string, bool) {
	for _, in := range iv {
		if in.Start > t {
			break
		}
		if t < in.End {
			return in.Node, true
		}
	}
	return "", false
}

func (h HandOver) String() string {
	to := h.To
	if to == "" {
		to = "nobody"
	}
	s := fmt.Sprintf("%s: %s → %s in %v", h.Act, h.From, to, h.Gap.Round(time.Millisecond))
	if h.Partitioned {
		s += " (under a network fault)"
	}
	return s
}
