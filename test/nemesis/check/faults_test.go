package check

import (
	"slices"
	"testing"
	"time"
)

func TestLeaderlessGaps(t *testing.T) {
	iv := beliefs([]JournalRecord{
		lead("h1", 1, 0, 1000), lead("h2", 2, 500, 1500), // overlapping, as a kill's interval may be
		lead("h3", 3, 3000, 4000), lead("h1", 4, 3500, 3800), // one inside another
		lead("h2", 5, 6000, 7000),
	})
	got := leaderless(iv, ms(200), ms(6500))
	want := []gap{{ms(1500), ms(3000)}, {ms(4000), ms(6000)}}
	if !slices.Equal(got, want) {
		t.Fatalf("gaps %v, want %v", got, want)
	}
	if got := leaderless(iv, ms(1600), ms(2000)); !slices.Equal(got, []gap{{ms(1600), ms(2000)}}) {
		t.Fatalf("a window inside a gap: %v", got)
	}
	if got := leaderless(iv, ms(3100), ms(3900)); len(got) != 0 {
		t.Fatalf("a window held throughout: %v", got)
	}
	if got := leaderless(iv, ms(6500), ms(9000)); !slices.Equal(got, []gap{{ms(7000), ms(9000)}}) {
		t.Fatalf("a gap to the window's end: %v", got)
	}
}

func TestFaultSpans(t *testing.T) {
	journal := []JournalRecord{lead("h1", 1, 0, 1000), lead("h2", 2, 4000, 9000)}
	events := []Event{
		ev(EventHeal, 100),
		{T: ms(500), Kind: EventPartition, Detail: "halves: h1 h2 | h3 h4 h5"},
		ev(EventQuorate, 510, "h3", "h4", "h5"),
		ev(EventKill, 600, "h1"), // a second fault event in the same span
		ev(EventHeal, 5000),
		ev(EventStart, 6000, "h1"), // not a fault
		ev(EventHeal, 6100),        // a heal with no fault before it: no span
		ev(EventPause, 7000, "h2"),
		ev(EventEnd, 9500), // the pause is still on: measured to the end
	}
	r := newRun(journal, nil, events)
	spans := FaultSpans(Beliefs(r.Journal, r.Events), r.Events, runEnd(r))
	want := []FaultSpan{
		{From: ms(500), To: ms(5000), What: "partition: halves: h1 h2 | h3 h4 h5", Quorate: ms(510), Leaderless: 3400 * time.Millisecond}, // the kill cut h1's belief,
		{From: ms(7000), To: ms(9500), What: "pause", Leaderless: 500 * time.Millisecond},
	}
	if !slices.Equal(spans, want) {
		t.Fatalf("spans\n%v\nwant\n%v", spans, want)
	}
}

// A fault that leaves a majority connected is judged from its quorate
// event to its heal; one that does not is measured only.
func TestLivenessDuringQuorateFaults(t *testing.T) {
	journal := []JournalRecord{lead("h1", 1, 0, 1000), lead("h2", 2, 4000, 9000)}
	run := func(quorate bool, heal int) *Run {
		events := []Event{ev(EventHeal, 100), ev(EventPartition, 500), ev(EventHeal, heal), ev(EventEnd, 9500)}
		if quorate {
			events = append(events, ev(EventQuorate, 510, "h3", "h4", "h5"))
		}
		return newRun(journal, nil, events)
	}
	// No lease from 1000 to 4000, inside the fault.
	v, _ := liveness(run(true, 5000), 2*time.Second)
	wantFail(t, v, 1, "no node held a valid lease for 3s", "majority of the voters connected", "bound 2s")
	v, _ = liveness(run(true, 5000), 3*time.Second)
	wantOK(t, v)
	v, _ = liveness(run(false, 5000), 2*time.Second)
	wantOK(t, v) // the heal's lease came at once: 0 after it
	// The gap reaches the heal: 2.5 s of it inside the fault already
	// exceeds the bound; 1.5 s does not (the heal's own check goes on).
	v, _ = liveness(run(true, 3500), 2*time.Second)
	wantFail(t, v, 1, "no node held a valid lease for 2.5s")
	v, waits := liveness(run(true, 2500), 2*time.Second)
	wantOK(t, v)
	if !slices.Equal(waits, []time.Duration{0, 1500 * time.Millisecond}) {
		t.Fatalf("liveness after heals %v", waits)
	}
	// A stretch before the quorate event is not judged.
	r := newRun(journal, nil, []Event{ev(EventHeal, 100), ev(EventPartition, 500), ev(EventQuorate, 3500, "h3", "h4", "h5"),
		ev(EventHeal, 5000), ev(EventEnd, 9500)})
	v, _ = liveness(r, 2*time.Second)
	wantOK(t, v)
}

// An operator's act with no fault under it begins a span of its own.
func TestFaultSpansOfOperatorActs(t *testing.T) {
	r := newRun([]JournalRecord{lead("h1", 1, 0, 1000), lead("h2", 2, 1200, 9000)}, nil, []Event{
		ev(EventHeal, 100),
		{T: ms(900), Kind: EventOperator, Nodes: []string{"h1"}, Detail: "tenure resign --hold 3s"},
		ev(EventQuorate, 910, "h1", "h2", "h3"),
		ev(EventHeal, 4000),
		ev(EventEnd, 5000),
	})
	spans := FaultSpans(Beliefs(r.Journal, r.Events), r.Events, runEnd(r))
	want := []FaultSpan{{From: ms(900), To: ms(4000), What: "operator: tenure resign --hold 3s", Quorate: ms(910), Leaderless: 200 * time.Millisecond}}
	if !slices.Equal(spans, want) {
		t.Fatalf("spans %v, want %v", spans, want)
	}
}
