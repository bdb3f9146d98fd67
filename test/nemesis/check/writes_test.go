package check

import (
	"strings"
	"testing"
	"time"
)

// childRun: h1 leads epoch 1 from 0 to 100 (ended at 90), h2 leads epoch 2
// from 100 to 200.
var childJournal = []JournalRecord{
	lead("h1", 1, 0, 100), end("h1", 1, 90),
	lead("h2", 2, 100, 200),
}

func checkChildren(history []Op, events []Event, opt Options) (Verdict, ChildCounts) {
	r := newRun(childJournal, history, events)
	return CheckChildren(r.History, Beliefs(r.Journal, r.Events), r.Events, opt)
}

func TestChildrenPass(t *testing.T) {
	v, c := checkChildren([]Op{
		write("h1", 1, "a", 10, 12, ResultOK),
		write("h1", 1, "b", 89, 95, ResultOK), // invoked inside, returned after
		read("h1", 1, "b", 96, 97, ResultOK),  // reads are not I3's business
		write("h2", 2, "c", 100, 101, ResultOK),
		write("h2", 2, "d", 150, 0, ResultUnknown),
	}, nil, Options{})
	wantOK(t, v)
	if c != (ChildCounts{}) {
		t.Fatalf("counts %+v", c)
	}
}

func TestChildrenFlagWriteAfterEnd(t *testing.T) {
	v, _ := checkChildren([]Op{write("h1", 1, "late", 95, 96, ResultStale)}, nil, Options{})
	wantFail(t, v, 1, `h1 (pid 1) wrote "late" with epoch 1`, "5ms after its belief was cut by the term's end record",
		"5ms before the lease")
}

func TestChildrenFlagWriteAfterExpiry(t *testing.T) {
	v, _ := checkChildren([]Op{write("h2", 2, "late", 230, 231, ResultOK)}, nil, Options{})
	wantFail(t, v, 1, "30ms after its lease ran out")
}

func TestChildrenFlagWriteInTermNeverHeld(t *testing.T) {
	v, _ := checkChildren([]Op{
		write("h2", 1, "x", 50, 51, ResultStale),
		write("h2", 2, "y", 50, 51, ResultOK), // before h2 led epoch 2
	}, nil, Options{})
	wantFail(t, v, 2, "a term it never believed it held")
	if want := "before it believed it held that term"; !strings.Contains(v.Details[1], want) {
		t.Fatalf("%q does not say %q", v.Details[1], want)
	}
}

// A paused holder's writer acting on its old lease right after the resume
// is excused (fencing must refuse it); after the grace it is not.
func TestChildrenExcuseWriteAfterResumeHost(t *testing.T) {
	events := []Event{ev(EventPauseHost, 50, "h2"), ev(EventResumeHost, 300, "h2")}
	v, c := checkChildren([]Op{
		write("h2", 2, "woke", 300, 301, ResultStale),
		write("h2", 2, "woke2", 1300, 1301, ResultStale),
	}, events, Options{})
	wantOK(t, v)
	if c.Excused != 2 {
		t.Fatalf("excused %d writes, want 2", c.Excused)
	}

	v, _ = checkChildren([]Op{write("h2", 2, "too-late", 1301, 1302, ResultStale)}, events, Options{})
	wantFail(t, v, 1, "too-late")

	v, c = checkChildren([]Op{write("h2", 2, "woke", 350, 351, ResultStale)}, events, Options{ResumeGrace: 10 * time.Millisecond})
	wantFail(t, v, 1, "woke")

	// A resume-host of another node excuses nothing.
	v, _ = checkChildren([]Op{write("h1", 1, "x", 310, 311, ResultStale)}, events, Options{})
	wantFail(t, v, 1, `"x"`)
}

func TestChildrenStopGrace(t *testing.T) {
	late := []Op{write("h1", 1, "late", 95, 96, ResultStale)}
	v, c := checkChildren(late, nil, Options{StopGrace: 5 * time.Millisecond})
	wantOK(t, v)
	if c.Graced != 1 {
		t.Fatalf("graced %d, want 1", c.Graced)
	}
	v, _ = checkChildren(late, nil, Options{StopGrace: 4 * time.Millisecond})
	wantFail(t, v, 1, "late")
	// The grace never reaches past the lease's until.
	v, _ = checkChildren([]Op{write("h1", 1, "expired", 101, 102, ResultStale)}, nil, Options{StopGrace: time.Second})
	wantFail(t, v, 1, "expired")
}

func TestMonotonePass(t *testing.T) {
	wantOK(t, CheckMonotone([]Op{
		write("h1", 1, "a", 0, 10, ResultOK),
		write("h1", 1, "b", 20, 30, ResultOK), // equal epochs are one term
		write("h2", 2, "c", 40, 50, ResultOK),
		write("h1", 1, "d", 60, 70, ResultStale),
		write("h1", 1, "e", 45, 0, ResultUnknown),
		// Concurrent with the epoch 3 write: it was not accepted before.
		write("h3", 3, "f", 80, 100, ResultOK),
		write("h2", 2, "g", 90, 95, ResultOK),
	}))
}

func TestMonotoneFlagsStaleWriteAccepted(t *testing.T) {
	v := CheckMonotone([]Op{
		write("h2", 2, "new", 0, 10, ResultOK),
		write("h1", 1, "old", 20, 30, ResultOK),
		write("h1", 1, "old2", 40, 50, ResultOK),
	})
	wantFail(t, v, 2, `h1's write "old" with epoch 1`, `h2's write "new" with epoch 2`)
}

// A write after its lease that follows a host stall still fails I3, and
// its violation names the stall, so the report explains itself.
func TestChildrenNameAHostStall(t *testing.T) {
	stall := Event{T: ms(1290), Kind: EventStall, Detail: "the harness ran nothing for 9.2s"}
	v, _ := checkChildren([]Op{write("h2", 2, "after-stall", 1300, 1301, ResultOK)}, []Event{stall}, Options{})
	wantFail(t, v, 1, "after-stall", "10ms after a host stall (the harness ran nothing for 9.2s)")

	v, _ = checkChildren([]Op{write("h2", 2, "long-after", 2300, 2301, ResultOK)}, []Event{stall}, Options{})
	wantFail(t, v, 1, "long-after")
	if strings.Contains(v.Details[0], "stall") {
		t.Fatalf("a stall 1.01 s before is named: %q", v.Details[0])
	}

	rep, err := Check(newRun(childJournal, nil, []Event{stall}), Options{TTL: time.Second, ElectionBound: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts["stalls"] != 1 || !strings.Contains(rep.String(), "host stall: the harness ran nothing for 9.2s, until") {
		t.Fatalf("report does not show the stall:\n%s", rep)
	}
}
