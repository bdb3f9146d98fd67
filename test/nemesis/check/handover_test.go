package check

import (
	"slices"
	"testing"
	"time"
)

// TestHandOversMeasureActsOnTheHolder: a stop or drain counts only when it
// hits the node holding the lease; a transfer or resign counts whichever
// node it was asked of; the gap runs from the act to the next other
// node's lease, and an act under a partition says so.
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
	}
	got := HandOvers(iv, events, ms(10000))
	want := []HandOver{
		{Act: "stop", From: "h5", To: "h4", Gap: 30 * time.Millisecond},
		{Act: "tenure transfer h3", From: "h4", To: "h3", Gap: 50 * time.Millisecond},
		{Act: "tenure resign --hold 5s", From: "h3", To: "h2", Gap: 600 * time.Millisecond, Partitioned: true},
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
