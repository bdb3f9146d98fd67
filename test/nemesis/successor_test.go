//go:build nemesis

package nemesis

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/test/nemesis/check"
)

// stalledHold is how long the named successor stays frozen or down: well
// past the liveness budget, so that a cluster that waited for it would
// fail the bound below.
const stalledHold = 15 * time.Second

// TestTransferToStalledSuccessor hands the leader's term to a node that
// cannot take it: paused (SIGSTOP) or killed just before the transfer, so
// that gossip still lists it alive and the leader accepts it as the
// successor. The others leave the election to it for the transfer window
// only: another node must hold the lease within the liveness budget
// (TTL plus the election bound) of the act, while the successor is still
// frozen or down, and every check must pass, also after the successor
// returns with the RESIGN naming it still to be read.
func TestTransferToStalledSuccessor(t *testing.T) {
	for _, under := range []string{FaultPause, FaultKill} {
		t.Run(under, func(t *testing.T) {
			bin := setUp(t, false)
			plan := []Step{{Kind: FaultTransfer, Under: under, OnSuccessor: true, Hold: stalledHold}}
			o := RunOptions{Cluster: Config{Bin: bin}, Plan: plan}
			res := runChecked(t, o)
			if res == nil || res.Report == nil {
				t.Fatal("no report")
			}
			if !res.OK() {
				t.Error("a check failed: see the summary above")
			}
			var transfers []check.HandOver
			for _, h := range res.Report.HandOvers {
				if strings.HasPrefix(h.Act, "tenure transfer ") {
					transfers = append(transfers, h)
				}
			}
			if len(transfers) != 1 {
				t.Fatalf("want one transfer that met the lease holder, got %v (steps: %+v)", transfers, res.Steps)
			}
			h := transfers[0]
			successor := strings.TrimPrefix(h.Act, "tenure transfer ")
			budget := *ttlFlag + *boundFlag
			switch {
			case h.To == "":
				t.Errorf("%s: no node held a lease after the transfer to the %s successor", h, under)
			case h.To == successor:
				t.Errorf("%s: the %s successor led, %v after the act, within the %v it was held", h, under, h.Gap, stalledHold)
			case h.Gap > budget:
				t.Errorf("%s: with the successor %s, the next lease came %v after the act, past the liveness budget %v",
					h, under, h.Gap.Round(time.Millisecond), budget)
			}
			t.Logf("transfer to a %s successor: %s (budget %v)", under, h, budget)
			if h.To != "" {
				keptTerm(t, res.Dir, h)
			}
		})
	}
}

// keptTerm fails t if any node but h.To began a term after h.To's, before
// the run's end: with h.To alive throughout, the node that handed over
// must not take the term back once its resign hold ends (a tenure run
// command would move twice), nor the successor once it returns below
// h.To.
func keptTerm(t *testing.T, dir string, h check.HandOver) {
	t.Helper()
	run, err := check.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	end := int64(math.MaxInt64)
	for _, e := range run.Events {
		if e.Kind == check.EventEnd {
			end = e.T
		}
	}
	for _, in := range check.Beliefs(run.Journal, run.Events) {
		if in.Start > h.At+int64(h.Gap) && in.Start < end && in.Node != h.To {
			t.Errorf("%s led epoch %d from %s, after %s took over from %s: the fallback leader's term was not kept",
				in.Node, in.Epoch, time.Unix(0, in.Start).UTC().Format("15:04:05.000"), h.To, h.From)
		}
	}
}
