//go:build nemesis

package nemesis

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/test/nemesis/check"
)

// stalledHold is how long the successor stays frozen or down: well past
// the liveness budget, so that a cluster that waited for it would fail the
// bound below, and past the resign hold of the node that handed over, so
// that one that took the term back would be seen doing it.
const stalledHold = 15 * time.Second

// TestHandOverToStalledSuccessor hands the leader's term to a node that
// cannot take it: paused (SIGSTOP) or killed just before the act, so that
// gossip still lists it alive and the leader names it in its RESIGN. For a
// transfer it is the node named; for a resign (here with a 3 s --hold),
// the natural successor, the running node of highest ID after the leader.
// The others leave the election to it for the transfer window only:
// another node must hold the lease within the liveness budget (TTL plus
// the election bound) of the act, while the successor is still frozen or
// down; that node must keep its term until the successor returns (the
// node that handed over does not take it back when its hold ends); and
// every check must pass, also after the successor returns with the RESIGN
// naming it still to be read.
func TestHandOverToStalledSuccessor(t *testing.T) {
	for _, c := range []struct {
		name string
		step Step
	}{
		{"transfer-pause", Step{Kind: FaultTransfer, Under: FaultPause, OnSuccessor: true, Hold: stalledHold}},
		{"transfer-kill", Step{Kind: FaultTransfer, Under: FaultKill, OnSuccessor: true, Hold: stalledHold}},
		{"resign-pause", Step{Kind: FaultResign, Under: FaultPause, OnSuccessor: true, Hold: 3 * time.Second, UnderHold: stalledHold}},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin := setUp(t, false)
			res := runChecked(t, RunOptions{Cluster: Config{Bin: bin}, Plan: []Step{c.step}})
			if res == nil || res.Report == nil {
				t.Fatal("no report")
			}
			if !res.OK() {
				t.Error("a check failed: see the summary above")
			}
			if len(res.Report.HandOvers) != 1 {
				t.Fatalf("want one act that met the lease holder, got %v (steps: %+v)", res.Report.HandOvers, res.Steps)
			}
			h := res.Report.HandOvers[0]
			run, err := check.Load(res.Dir)
			if err != nil {
				t.Fatal(err)
			}
			stalled, back := stalledSuccessor(t, run, h)
			budget := *ttlFlag + *boundFlag
			switch {
			case h.To == "":
				t.Fatalf("%s: no node held a lease after it, with %s stalled", h, stalled)
			case h.To == stalled:
				t.Fatalf("%s: the stalled %s led, %v after the act, within the %v it was held", h, stalled, h.Gap, stalledHold)
			case h.Gap > budget:
				t.Errorf("%s: with %s stalled, the next lease came %v after the act, past the liveness budget %v",
					h, stalled, h.Gap.Round(time.Millisecond), budget)
			}
			t.Logf("%s stalled: %s (budget %v)", stalled, h, budget)
			for _, in := range check.Beliefs(run.Journal, run.Events) {
				if in.Start > h.At+int64(h.Gap) && in.Start < back && in.Node != h.To {
					t.Errorf("%s led epoch %d from %s, after %s took over from %s and before %s returned: %s's term was not kept",
						in.Node, in.Epoch, time.Unix(0, in.Start).UTC().Format("15:04:05.000"), h.To, h.From, stalled, h.To)
				}
			}
		})
	}
}

// stalledSuccessor is the node the harness paused or killed for the act
// of h, and when it returned (resumed or restarted; the run's end if
// neither came).
func stalledSuccessor(t *testing.T, run *check.Run, h check.HandOver) (name string, back int64) {
	t.Helper()
	back = math.MaxInt64
	for _, e := range run.Events {
		switch {
		case name == "" && (e.Kind == check.EventPause || e.Kind == check.EventKill) && e.T <= h.At && len(e.Nodes) == 1:
			name = e.Nodes[0]
		case name != "" && e.T > h.At && e.Kind == check.EventEnd:
			return name, min(back, e.T)
		case name != "" && e.T > h.At && (e.Kind == check.EventResume || e.Kind == check.EventStart) && slices.Contains(e.Nodes, name):
			back = min(back, e.T)
		}
	}
	if name == "" {
		t.Fatalf("no pause or kill of one node before %s", h.Act)
	}
	return name, back
}
