package check

import (
	"slices"
	"testing"
	"time"
)

// TestHandOversMeasureActsOnTheHolder: a stop or drain counts only when it
// hits the node holding the lease; a transfer or resign counts whichever
// node it was asked of; the gap runs from the act to the next other
// node's lease, and an act under a partition or a kill says so.
func TestHandOversMeasureActsOnTheHolder(t *testing.T) {
	iv := beliefs([]JournalRecord{
		lead("h5", 1, 0, 2000), end("h5", 1, 110),
		lead("h4", 2, 130, 3000), end("h4", 2, 1010),
		lead("h3", 3, 1050, 5000), end("h3", 3, 2020),
		lead("h2", 4, 2600, 9000),
	})
	op := func(at int, node, cmd string) Event { e := ev(EventOperator, at, node); e.Detail = cmd; return e }
	events := []Event{
		ev(EventStop, 50, "h1"),              // a follower's stop: no hand-over
		ev(EventStop, 100, "h5"),             // the holder's stop: h5 → h4 in 30 ms
		op(200, "h1", "tenure drain"),        // a follower's drain: none
		op(1000, "h1", "tenure transfer h3"), // asked of a follower: h4 → h3 in 50 ms
		op(1500, "h3", "tenure drain --off"), // lifting a drain moves nothing
		ev(EventPartition, 1900),
		op(2000, "h3", "tenure resign --hold 5s"), // h3 → h2 in 600 ms, partitioned
		ev(EventHeal, 2500),
		ev(EventKill, 2550, "h1"),
		op(2600, "h2", "tenure transfer h1"), // h2 → h1 never: faulted, to the end
		ev(EventStart, 3000, "h1"),           // restarted, but no heal yet
		op(3100, "h2", "tenure resign --hold 2s"),
	}
	got := HandOvers(iv, events, ms(10000))
	want := []HandOver{
		{At: ms(100), Act: "stop", From: "h5", To: "h4", Gap: 30 * time.Millisecond, LeaseLeft: 1900 * time.Millisecond},
		{At: ms(1000), Act: "tenure transfer h3", From: "h4", To: "h3", Gap: 50 * time.Millisecond, LeaseLeft: 2000 * time.Millisecond},
		{At: ms(2000), Act: "tenure resign --hold 5s", From: "h3", To: "h2", Gap: 600 * time.Millisecond, LeaseLeft: 3000 * time.Millisecond, Faulted: true},
		{At: ms(2600), Act: "tenure transfer h1", From: "h2", Gap: 7400 * time.Millisecond, LeaseLeft: 6400 * time.Millisecond, Faulted: true},
		{At: ms(3100), Act: "tenure resign --hold 2s", From: "h2", Gap: 6900 * time.Millisecond, LeaseLeft: 5900 * time.Millisecond, Faulted: true},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("hand-overs\n got %+v\nwant %+v", got, want)
	}
	// A resign whose node leads again, in a later term, before any other
	// node: the hand-over is to itself.
	got = HandOvers(beliefs([]JournalRecord{lead("h6", 1, 0, 2000), end("h6", 1, 110), lead("h6", 2, 2300, 4300)}),
		[]Event{op(100, "h6", "tenure resign --hold 2s")}, ms(5000))
	if len(got) != 1 || got[0].To != "h6" || got[0].Gap != 2200*time.Millisecond {
		t.Fatalf("a resign led again by its node: %+v", got)
	}
	// With no successor before the end, the gap runs to the end.
	got = HandOvers(beliefs([]JournalRecord{lead("h5", 1, 0, 2000)}), []Event{ev(EventStop, 100, "h5")}, ms(4000))
	if len(got) != 1 || got[0].To != "" || got[0].Gap != 3900*time.Millisecond {
		t.Fatalf("a stop with no successor: %+v", got)
	}
}

// TestHandOverVerdict: with no fault on, a hand-over must give the next
// node its lease before the old lease would have run out; one that waited
// for it, or that no lease followed, fails. Under a fault (a partition, a
// kill, a pause), or when the agent refused the command, it is measured
// only; a heal ends the fault.
func TestHandOverVerdict(t *testing.T) {
	op := func(at int, node, cmd string) Event { e := ev(EventOperator, at, node); e.Detail = cmd; return e }
	refusal := func(at int, node, cmd string) Event { e := ev(EventRefused, at, node); e.Detail = cmd; return e }
	run := func(journal []JournalRecord, events ...Event) Verdict {
		return CheckHandOvers(HandOvers(beliefs(journal, events...), events, ms(20000)))
	}
	fast := []JournalRecord{lead("h5", 1, 0, 2000), end("h5", 1, 120), lead("h4", 2, 160, 4000)}
	wantOK(t, run(fast, op(100, "h5", "tenure resign --hold 3s")))
	// The successor's lease came only once h5's had run out (at 2000).
	slow := []JournalRecord{lead("h5", 1, 0, 2000), end("h5", 1, 120), lead("h4", 2, 2050, 4000)}
	wantFail(t, run(slow, op(100, "h5", "tenure resign --hold 3s")), 1, "waited for the old lease")
	// No lease after the act at all.
	wantFail(t, run([]JournalRecord{lead("h5", 1, 0, 2000), end("h5", 1, 120)}, ev(EventStop, 100, "h5")), 1, "no node held a lease")
	// The same, under a partition or refused: measured only.
	wantOK(t, run(slow, ev(EventPartition, 50), op(100, "h5", "tenure resign --hold 3s"), ev(EventHeal, 3000)))
	wantOK(t, run(slow, ev(EventPause, 50, "h4"), op(100, "h5", "tenure resign --hold 3s"), ev(EventResume, 3000, "h4"), ev(EventHeal, 3000)))
	wantFail(t, run(slow, ev(EventKill, 20, "h3"), ev(EventStart, 40, "h3"), ev(EventHeal, 50),
		op(100, "h5", "tenure resign --hold 3s")), 1, "waited for the old lease")
	wantOK(t, run([]JournalRecord{lead("h5", 1, 0, 2000), lead("h5", 1, 1500, 3500), lead("h4", 2, 3600, 6000)},
		op(100, "h5", "tenure transfer h4"), refusal(1200, "h5", "tenure transfer h4")))
	// A refusal of another command does not excuse this one.
	wantFail(t, run(slow, op(100, "h5", "tenure resign --hold 3s"), refusal(150, "h5", "tenure drain")), 1, "waited for the old lease")
}

// TestHandOverUndone: a node that handed its term over and then ends its
// successor's term early, leading the next one itself with nothing in
// between, undid the hand-over; a restart, a fault or an operator's act
// in between, a successor whose lease ran out, or another node next, do
// not count.
func TestHandOverUndone(t *testing.T) {
	op := func(at int, node, cmd string) Event { e := ev(EventOperator, at, node); e.Detail = cmd; return e }
	resign := op(100, "h5", "tenure resign --hold 3s")
	run := func(journal []JournalRecord, events ...Event) Verdict {
		return CheckHandOvers(HandOvers(beliefs(journal, events...), events, ms(20000)))
	}
	taken := func(next string) []JournalRecord {
		return []JournalRecord{lead("h5", 1, 0, 2000), end("h5", 1, 120),
			lead("h4", 2, 160, 2160), extend("h4", 2, 3000, 5000), end("h4", 2, 3200), // ended early
			lead(next, 3, 3250, 5250)}
	}
	got := HandOvers(beliefs(taken("h5")), []Event{resign}, ms(20000))
	if len(got) != 1 || got[0].To != "h4" || got[0].Back != 3150*time.Millisecond {
		t.Fatalf("h5 took its term back from h4 3.15 s after its resign: %+v", got)
	}
	wantFail(t, run(taken("h5"), resign), 1, "undone")
	wantOK(t, run(taken("h3"), resign))
	wantOK(t, run(taken("h5"), resign, ev(EventStart, 3000, "h5")))
	wantOK(t, run(taken("h5"), resign, ev(EventPartition, 3000), ev(EventHeal, 3100)))
	wantOK(t, run(taken("h5"), resign, op(3000, "h5", "tenure drain --off")))
	wantOK(t, run(taken("h5"), resign, ev(EventDiskFull, 3000, "h4")))
	// h4's lease ran out (its end record came at its end): not taken.
	ranOut := []JournalRecord{lead("h5", 1, 0, 2000), end("h5", 1, 120),
		lead("h4", 2, 160, 2160), extend("h4", 2, 3000, 5000), end("h4", 2, 5010), lead("h5", 3, 5100, 7100)}
	wantOK(t, run(ranOut, resign))
	// After the run's end the harness stops the agents: h4's stop hands
	// the term back to h5, and no event says so.
	if got := HandOvers(beliefs(taken("h5")), []Event{resign}, ms(3240)); len(got) != 1 || got[0].Back != 0 {
		t.Fatalf("a lead after the run's end counted as taking the term back: %+v", got)
	}
}
