//go:build nemesis

package nemesis

import (
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/test/nemesis/check"
)

// TestHandOverTallyAligns: the tally's counts stand in one column, however
// long an act's label grows; a refused act is counted, with no times (the
// leader kept its term, and led again only after some later event).
func TestHandOverTallyAligns(t *testing.T) {
	var b strings.Builder
	writeHandOvers(&b, []check.HandOver{
		{Act: "stop", From: "h5", To: "h4", Gap: 15 * time.Millisecond},
		{Act: "tenure transfer h3", From: "h5", To: "h5", Gap: 20 * time.Second, Faulted: true, Refused: true},
		{Act: "tenure resign --hold 3s", From: "h5", To: "h5", Gap: 3 * time.Second},
	})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("tally:\n%s", b.String())
	}
	col := func(l string) int { return strings.Index(l, "  1  ") }
	if c := col(lines[1]); c < 0 || c != col(lines[2]) || c != col(lines[3]) {
		t.Fatalf("the counts are not in one column:\n%s", b.String())
	}
	want := []string{"resign (led again by its node)", "stop", "transfer under a fault (refused)"}
	for i, w := range want {
		if !strings.Contains(lines[i+1], w+" ") {
			t.Errorf("line %d = %q, want the act %q", i+2, lines[i+1], w)
		}
	}
	if !strings.HasSuffix(lines[3], "nothing handed over") || strings.Contains(lines[3], "median") {
		t.Errorf("a refused act shows times: %q", lines[3])
	}
}

// TestUnsettledStepFailsTheRun: a run in which every check passed but the
// agents did not agree on a leader after a step fails, and says after
// which step; the same run with every step settled passes.
func TestUnsettledStepFailsTheRun(t *testing.T) {
	passed := &check.Report{Verdicts: []check.Verdict{{Name: check.NameOneLease, OK: true}}}
	steps := []StepResult{
		{Step: Step{Kind: FaultPause}, Stable: time.Second},
		{Step: Step{Kind: FaultStop}, Stable: 12 * time.Second, Unstable: "h1 sees 4 live members of 5 running"},
	}
	r := &Result{Seed: 7, Steps: steps, Report: passed}
	if r.OK() {
		t.Fatal("a run with an unsettled step passed")
	}
	if got := r.Unsettled(); len(got) != 1 || got[0] != "step 2" {
		t.Fatalf("Unsettled() = %q, want [step 2]", got)
	}
	if s := r.Summary(RunOptions{}); !strings.HasPrefix(s, "nemesis run: FAIL") || !strings.Contains(s, "UNSETTLED: no agreement on a leader after step 2") {
		t.Fatalf("the summary does not say so:\n%s", s)
	}
	var tally Tally
	tally.Add(r)
	if len(tally.FailedSeeds) != 1 || tally.Failed["settle"] != 1 || tally.Unstable[FaultStop] != 1 {
		t.Fatalf("tally: %s", &tally)
	}

	r.Steps[1].Unstable = ""
	if !r.OK() || len(r.Unsettled()) != 0 {
		t.Fatalf("the run with every step settled failed: %q", r.Unsettled())
	}
	r.BootUnstable = "h3 knows no leader"
	if r.OK() || r.Unsettled()[0] != "boot" {
		t.Fatalf("a run whose boot did not settle passed: %q", r.Unsettled())
	}
}

// TestBlipTallySeparatesFaults: the tally counts the followers' blips
// with no fault on apart from those under one, each with its longest.
func TestBlipTallySeparatesFaults(t *testing.T) {
	var tally Tally
	tally.Add(&Result{Report: &check.Report{Blips: []check.Blip{
		{Node: "h1", Gap: 800 * time.Millisecond},
		{Node: "h2", Gap: 1200 * time.Millisecond, Faulted: true},
	}}})
	tally.Add(&Result{Report: &check.Report{Blips: []check.Blip{{Node: "h3", Gap: 300 * time.Millisecond}}}})
	want := `followers that said "no leader" while their leader's term went on: 2 with no fault on (longest 800ms), 1 under a fault (longest 1.2s)`
	if s := tally.String(); !strings.Contains(s, want) {
		t.Fatalf("tally:\n%s\nwant the line %q", s, want)
	}
	tally.Add(&Result{Seed: 7, Report: &check.Report{Stalls: []check.Event{{Kind: check.EventStall, Detail: "the harness ran nothing for 9.2s"}}}})
	if s := tally.String(); !strings.Contains(s, "host stalls (every process stopped; checks near one may fail for it): seed 7: the harness ran nothing for 9.2s\n") {
		t.Fatalf("tally does not list the stall:\n%s", s)
	}
	tally.Add(&Result{Seed: 8, Report: &check.Report{Stalls: []check.Event{{Kind: check.EventClockStep, Detail: "the wall clock stepped +17.2s against the monotonic clock"}}}})
	if s := tally.String(); !strings.Contains(s, "wall clock steps (the checker moved the stamps after a forward one back by it): seed 8: the wall clock stepped +17.2s") ||
		strings.Contains(s, "seed 7: the harness ran nothing for 9.2s; seed 8") {
		t.Fatalf("tally does not list the clock step apart from the stall:\n%s", s)
	}
	var none Tally
	none.Add(&Result{Report: &check.Report{}})
	if s := none.String(); !strings.Contains(s, ": 0 with no fault on, 0 under a fault\n") {
		t.Fatalf("tally without blips:\n%s", s)
	}
}
