package check

import (
	"fmt"
	"slices"
	"time"
)

// ChildCounts are the writes I3 excused rather than flagged.
type ChildCounts struct {
	Excused int // invoked within ResumeGrace of a resume-host of the writer's node
	Graced  int // invoked within StopGrace after the term's interval was cut, before its Until
}

// CheckChildren is I3: every write by node N with epoch E (whatever its
// result) was invoked while N believed it held term E, inside one of the
// term's intervals in iv (as Beliefs returns it). A write invoked within
// opt.ResumeGrace after a resume-host of N is excused: a paused holder
// acting on an old lease is what fencing must catch. With opt.StopGrace,
// so is one invoked within StopGrace after its term's interval was cut
// short (end record, restart, kill) while the lease it believed was still
// running. events must be sorted by T.
func CheckChildren(ops []Op, iv []Interval, events []Event, opt Options) (Verdict, ChildCounts) {
	v := verdict{name: NameChildren}
	idx := indexTerms(iv)
	resumes := eventTimes(events, EventResumeHost)
	stalls := eventsOf(events, EventStall)
	var c ChildCounts
	n := 0
	for _, o := range ops {
		if o.Op != OpWrite {
			continue
		}
		n++
		in, ok := idx.lastBefore(o.Node, o.Epoch, o.Invoke)
		switch {
		case ok && o.Invoke < in.End:
		case firstAtOrAfter(resumes[o.Node], o.Invoke-int64(opt.resumeGrace())) <= o.Invoke:
			c.Excused++
		case ok && o.Invoke < in.Until && time.Duration(o.Invoke-in.End) <= opt.StopGrace:
			c.Graced++
		default:
			v.failf("%s%s", outsideTerm(o, in, ok, len(idx[term{o.Node, o.Epoch}]) > 0),
				afterStall(stalls, o.Invoke, opt.resumeGrace()))
		}
	}
	return v.done(fmt.Sprintf("%d writes, each inside its node's term (%d excused after resume-host, %d in the stop grace)",
		n, c.Excused, c.Graced)), c
}

// afterStall names the host stall that ended within grace before t, if
// any: every process stopped, and a command that ran first after it acted
// on a lease that had run out meanwhile.
func afterStall(stalls []Event, t int64, grace time.Duration) string {
	for _, st := range slices.Backward(stalls) {
		if st.T <= t && t-st.T <= int64(grace) {
			return fmt.Sprintf("; %v after a host stall (%s)", time.Duration(t-st.T).Round(time.Millisecond), st.Detail)
		}
	}
	return ""
}

// eventsOf returns the events of any of kinds, in their order.
func eventsOf(events []Event, kinds ...string) []Event {
	var out []Event
	for _, e := range events {
		if slices.Contains(kinds, e.Kind) {
			out = append(out, e)
		}
	}
	return out
}

// outsideTerm describes a write invoked outside its term; in is the term's
// latest interval before it, if ok.
func outsideTerm(o Op, in Interval, ok, everHeld bool) string {
	w := fmt.Sprintf("%s (pid %d) wrote %q with epoch %d at %s", o.Node, o.PID, o.Value, o.Epoch, stamp(o.Invoke))
	switch {
	case !everHeld:
		return w + ", a term it never believed it held"
	case !ok:
		return w + ", before it believed it held that term"
	case o.Invoke >= in.Until:
		return fmt.Sprintf("%s, %v after its lease ran out", w, time.Duration(o.Invoke-in.Until))
	}
	return fmt.Sprintf("%s, %v after its belief was cut by %s, %v before the lease it believed would run out",
		w, time.Duration(o.Invoke-in.End), cutWhat(in.CutBy), time.Duration(in.Until-o.Invoke))
}

func cutWhat(cutBy string) string {
	switch cutBy {
	case CutEnd:
		return "the term's end record"
	case CutStart:
		return "a restart of its agent"
	case CutKill:
		return "a kill of its agent"
	}
	return cutBy
}

// CheckMonotone is I4's direct form: no write was accepted with an epoch
// lower than that of a write accepted before it was invoked (one whose
// return precedes its invoke).
func CheckMonotone(ops []Op) Verdict {
	v := verdict{name: NameMonotone}
	var ok []Op
	for _, o := range ops {
		if o.Op == OpWrite && o.Result == ResultOK {
			ok = append(ok, o)
		}
	}
	byReturn := sortedBy(ok, func(o Op) int64 { return o.Return })
	var highest Op
	have := false
	i := 0
	for _, o := range sortedBy(ok, func(o Op) int64 { return o.Invoke }) {
		for ; i < len(byReturn) && byReturn[i].Return < o.Invoke; i++ {
			if !have || byReturn[i].Epoch > highest.Epoch {
				highest, have = byReturn[i], true
			}
		}
		if have && o.Epoch < highest.Epoch {
			v.failf("%s's write %q with epoch %d was accepted at %s, after %s's write %q with epoch %d was accepted at %s",
				o.Node, o.Value, o.Epoch, stamp(o.Return), highest.Node, highest.Value, highest.Epoch, stamp(highest.Return))
		}
	}
	return v.done(fmt.Sprintf("%d accepted writes, epochs never below an accepted one", len(ok)))
}
