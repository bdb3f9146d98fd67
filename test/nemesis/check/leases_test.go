package check

import (
	"slices"
	"testing"
	"time"
)

func TestBeliefsMergeAndCut(t *testing.T) {
	journal := []JournalRecord{
		start("h1", 0),
		lead("h1", 3, 10, 110),
		extend("h1", 3, 40, 140),
		extend("h1", 3, 200, 300), // after expiry: a segment of its own
		end("h1", 3, 250),
		lead("h1", 5, 400, 500),
		start("h1", 450), // a restart cuts epoch 5
		lead("h2", 4, 600, 700),
	}
	kill := ev(EventKill, 650, "h2")
	want := []Interval{
		{Node: "h1", Epoch: 3, Start: ms(10), End: ms(140), Until: ms(140)},
		{Node: "h1", Epoch: 3, Start: ms(200), End: ms(250), Until: ms(300), CutBy: CutEnd},
		{Node: "h1", Epoch: 5, Start: ms(400), End: ms(450), Until: ms(500), CutBy: CutStart},
		{Node: "h2", Epoch: 4, Start: ms(600), End: ms(650), Until: ms(700), CutBy: CutKill},
	}
	if iv := beliefs(journal, kill); !slices.Equal(iv, want) {
		t.Fatalf("intervals\n got %+v\nwant %+v", iv, want)
	}
	slices.Reverse(journal) // Beliefs needs no sorted input
	if iv := Beliefs(journal, []Event{kill}); !slices.Equal(iv, want) {
		t.Fatalf("intervals from a reversed journal\n got %+v\nwant %+v", iv, want)
	}
}

func TestOneLeaseHandOverPasses(t *testing.T) {
	iv := beliefs([]JournalRecord{
		lead("h1", 1, 0, 100), extend("h1", 1, 30, 130), end("h1", 1, 120),
		lead("h2", 2, 125, 225), extend("h2", 2, 200, 300),
		lead("h3", 4, 300, 400), // starts exactly where h2's lease runs out
	})
	wantOK(t, CheckOneLease(iv))
}

func TestOneLeaseFlagsOverlap(t *testing.T) {
	iv := beliefs([]JournalRecord{lead("h1", 1, 0, 100), lead("h2", 2, 50, 150)})
	wantFail(t, CheckOneLease(iv), 1, "h1 (epoch 1)", "h2 (epoch 2)", "for 50ms")
}

// An extend after the lease ran out resurrects it: that segment counts.
func TestOneLeaseFlagsResurrectionByExtend(t *testing.T) {
	iv := beliefs([]JournalRecord{
		lead("h1", 1, 0, 100),
		lead("h2", 2, 110, 210),
		extend("h1", 1, 150, 250),
	})
	wantFail(t, CheckOneLease(iv), 1, "h1 (epoch 1)", "h2 (epoch 2)", "for 60ms")
}

// A kill or a restart ends the killed node's belief, so the next leader
// does not overlap it even though the old lease had time left.
func TestOneLeaseKillOrRestartCutsInterval(t *testing.T) {
	for name, cut := range map[string]struct {
		journal []JournalRecord
		events  []Event
	}{
		"kill":    {events: []Event{ev(EventKill, 40, "h1")}},
		"restart": {journal: []JournalRecord{start("h1", 40)}},
		"end":     {journal: []JournalRecord{end("h1", 1, 40)}},
	} {
		t.Run(name, func(t *testing.T) {
			journal := append([]JournalRecord{lead("h1", 1, 0, 100), lead("h2", 2, 60, 160)}, cut.journal...)
			wantOK(t, CheckOneLease(beliefs(journal, cut.events...)))
		})
	}
	// Without the cut, the same journal overlaps.
	wantFail(t, CheckOneLease(beliefs([]JournalRecord{lead("h1", 1, 0, 100), lead("h2", 2, 60, 160)})), 1, "40ms")
}

// A graceful stop or an operator's command cuts nothing: the agent must
// journal its term's end before it lets the lease go, so a successor that
// leads before that end is an overlap.
func TestOneLeaseStopAndOperatorCutNothing(t *testing.T) {
	journal := []JournalRecord{lead("h1", 1, 0, 100), lead("h2", 2, 60, 160)}
	wantFail(t, CheckOneLease(beliefs(journal, ev(EventStop, 40, "h1"), ev(EventOperator, 40, "h1"))), 1, "40ms")
	wantOK(t, CheckOneLease(beliefs(append(journal, end("h1", 1, 55)), ev(EventStop, 40, "h1"))))
}

// An end record of another epoch does not cut, and a kill of another node
// does not either.
func TestOneLeaseCutsOnlyTheirOwn(t *testing.T) {
	iv := beliefs([]JournalRecord{lead("h1", 1, 0, 100), end("h1", 7, 40), lead("h2", 2, 60, 160)},
		ev(EventKill, 40, "h3"))
	wantFail(t, CheckOneLease(iv), 1, "40ms")
}

func TestEpochsPass(t *testing.T) {
	wantOK(t, CheckEpochs(newRun([]JournalRecord{
		start("h1", 0), lead("h1", 1, 10, 100), extend("h1", 1, 40, 130),
		start("h1", 50), // restart, then another node leads a higher epoch
		lead("h2", 3, 200, 300), end("h2", 3, 250),
		lead("h2", 4, 260, 360),
		end("h5", 9, 270), // an end of a term never led is harmless
	}, nil, nil).Journal))
}

func TestEpochsFlagRepeatedEpoch(t *testing.T) {
	v := CheckEpochs(newRun([]JournalRecord{lead("h1", 3, 0, 100), lead("h2", 3, 200, 300)}, nil, nil).Journal)
	wantFail(t, v, 1, "epoch 3 led twice", "h1", "h2")

	v = CheckEpochs(newRun([]JournalRecord{lead("h1", 3, 0, 100), end("h1", 3, 50), lead("h1", 3, 200, 300)}, nil, nil).Journal)
	wantFail(t, v, 1, "epoch 3 led twice")
}

func TestEpochsFlagDecreaseAcrossRestart(t *testing.T) {
	v := CheckEpochs(newRun([]JournalRecord{
		start("h1", 0), lead("h1", 5, 10, 100), lead("h2", 6, 150, 250),
		start("h1", 300), lead("h1", 4, 400, 500), // its epoch file was lost
	}, nil, nil).Journal)
	wantFail(t, v, 1, "h1 led epoch 4", "after h2 led epoch 6")
}

func TestEpochsFlagExtendWithoutLead(t *testing.T) {
	v := CheckEpochs(newRun([]JournalRecord{lead("h1", 5, 0, 100), extend("h2", 5, 50, 150)}, nil, nil).Journal)
	wantFail(t, v, 1, "h2 extended epoch 5")
}

func TestLiveness(t *testing.T) {
	journal := []JournalRecord{lead("h1", 1, 0, 500), lead("h2", 2, 1500, 2500), lead("h3", 3, 5000, 6000)}
	events := []Event{
		ev(EventHeal, 100),  // h1 holds through it: 0
		ev(EventHeal, 1000), // h2 leads 500ms later
		ev(EventHeal, 3000), // h3 leads 2s later: too late
		ev(EventEnd, 7000),
		ev(EventHeal, 8000), // after the end: ignored
	}
	r := newRun(journal, nil, events)
	v, waits := liveness(r, time.Second)
	wantFail(t, v, 1, "2s later", "bound 1s")
	if want := []time.Duration{0, 500 * time.Millisecond, 2 * time.Second}; !slices.Equal(waits, want) {
		t.Fatalf("liveness %v, want %v", waits, want)
	}
}

func TestLivenessPasses(t *testing.T) {
	r := newRun([]JournalRecord{lead("h1", 1, 1500, 2500)}, nil, []Event{ev(EventHeal, 1000), ev(EventEnd, 3000)})
	v, waits := liveness(r, time.Second)
	wantOK(t, v)
	if !slices.Equal(waits, []time.Duration{500 * time.Millisecond}) {
		t.Fatalf("liveness %v", waits)
	}
}

// A heal with no lease before the end fails only once the bound passed.
func TestLivenessHealNearTheEnd(t *testing.T) {
	journal := []JournalRecord{lead("h1", 1, 0, 100), lead("h1", 2, 1700, 2000)}
	// The heal is at 500 and the next lease at 1700, 1.2s later.
	for endAt, fails := range map[int]bool{1400: false, 1499: false, 1500: true, 1600: true, 2500: true} {
		r := newRun(journal, nil, []Event{ev(EventHeal, 500), ev(EventEnd, endAt)})
		v, waits := liveness(r, time.Second)
		if v.OK == fails || len(waits) != 1 {
			t.Errorf("end at %d: verdict %+v, liveness %v", endAt, v, waits)
		}
	}
	r := newRun(journal[:1], nil, []Event{ev(EventHeal, 500), ev(EventEnd, 2500)})
	v, waits := liveness(r, time.Second)
	wantFail(t, v, 1, "no node held a valid lease in the 2s")
	if !slices.Equal(waits, []time.Duration{2 * time.Second}) {
		t.Fatalf("liveness %v", waits)
	}
}
