package check

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// The checks' names, in the order of Report.Verdicts.
const (
	NameOneLease     = "I1"
	NameEpochs       = "I2"
	NameChildren     = "I3"
	NameLinearizable = "I4-linearizable"
	NameMonotone     = "I4-monotone"
	NameLiveness     = "I5"
	NameHandOver     = "hand-over"
)

// titles say in a few words what each check asks.
var titles = map[string]string{
	NameOneLease:     "one lease at a time",
	NameEpochs:       "epochs unique and increasing",
	NameChildren:     "writes only inside the writer's term",
	NameLinearizable: "the store's history is linearizable",
	NameMonotone:     "no accepted write below an accepted epoch",
	NameLiveness:     "a leader soon after every heal, and during faults that leave a majority connected",
	NameHandOver:     "an operator's hand-over does not wait for the old lease, and is not undone",
}

// MaxDetails caps the violations a Verdict lists; one more line says how
// many were left out.
const MaxDetails = 20

// Verdict is the outcome of one check.
type Verdict struct {
	Name    string   `json:"name"`
	OK      bool     `json:"ok"`
	Details []string `json:"details"` // the violations (at most MaxDetails+1 lines), or a one-line summary when OK
}

// verdict collects one check's violations.
type verdict struct {
	name       string
	violations []string
}

func (v *verdict) failf(format string, args ...any) {
	v.violations = append(v.violations, fmt.Sprintf(format, args...))
}

// done returns the Verdict: failed with the (capped) violations, or
// passed with summary.
func (v *verdict) done(summary string) Verdict {
	if len(v.violations) == 0 {
		return Verdict{Name: v.name, OK: true, Details: []string{summary}}
	}
	d := v.violations
	if len(d) > MaxDetails {
		d = append(slices.Clip(d[:MaxDetails]), fmt.Sprintf("… and %d more", len(d)-MaxDetails))
	}
	return Verdict{Name: v.name, Details: d}
}

// Report is the outcome of every check of one run.
type Report struct {
	Verdicts []Verdict // NameOneLease, NameEpochs, NameChildren, NameLinearizable, NameMonotone, NameLiveness, NameHandOver
	// Liveness has one entry per heal before the end: the time from the
	// heal to the first instant a node held a valid lease (0 if one held
	// through the heal). For a heal followed by no lease before the run's
	// end, the time from the heal to the end: a lower bound.
	Liveness []time.Duration
	// Faults are the run's faults, each with the longest time no node
	// held a lease during it (measured; I5 judges those that left a
	// majority of the voters connected).
	Faults []FaultSpan
	// HandOvers measures each operator's act that moved leadership on
	// purpose: who held the lease, who held the next, and how long after
	// the act. NameHandOver judges those made with no fault on.
	HandOvers []HandOver
	// Blips are the followers that said "no leader" while the term they
	// followed went on (measured only; none with no fault on is what the
	// election aims at).
	Blips []Blip
	// Stale are the followers that named a leader for MinStale or more
	// after its term had ended (measured only: tenure promises who leads
	// through `tenure leader --check` and the fence, not through a
	// follower's view).
	Stale []Stale
	// Stalls are the times the harness ran nothing for a while
	// (EventStall): the host stalled. Checks that fail near one name it.
	// The steps of the wall clock (EventClockStep) are listed here too:
	// Load took the forward ones out of the records' stamps.
	Stalls []Event
	// Counts measures the run; every report has these keys: "terms"
	// (lead records), "writes-ok", "writes-stale", "writes-unknown",
	// "writes-unrecorded" (values read that no recorded write carries),
	// "reads" (all reads), "reads-unknown", "kills", "pauses" (pause and
	// pause-host), "pause-hosts", "starts", "wipes", "stops" (graceful,
	// each per node), "operator-commands", "partitions", "heals" (before
	// the end), "excused-writes" (I3, after
	// a resume-host), "grace-writes" (I3, within Options.StopGrace) and
	// "stalls" (EventStall) and "clock-steps" (EventClockStep).
	Counts map[string]int
}

// OK reports whether every check passed.
func (r *Report) OK() bool {
	for _, v := range r.Verdicts {
		if !v.OK {
			return false
		}
	}
	return len(r.Verdicts) > 0
}

// Verdict returns the verdict of the named check, if the report has one.
func (r *Report) Verdict(name string) (Verdict, bool) {
	for _, v := range r.Verdicts {
		if v.Name == name {
			return v, true
		}
	}
	return Verdict{}, false
}

// String is a readable summary: one block per check, then the
// measurements.
func (r *Report) String() string {
	var b strings.Builder
	overall := "PASS"
	if !r.OK() {
		overall = "FAIL"
	}
	fmt.Fprintf(&b, "nemesis check: %s\n", overall)
	for _, v := range r.Verdicts {
		mark := "ok  "
		if !v.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "%s %-16s %s\n", mark, v.Name, titles[v.Name])
		for _, d := range v.Details {
			fmt.Fprintf(&b, "       %s\n", d)
		}
	}
	fmt.Fprintf(&b, "liveness after heals: %s\n", durations(r.Liveness))
	for _, f := range r.Faults {
		fmt.Fprintf(&b, "fault: %s\n", f)
	}
	for _, h := range r.HandOvers {
		fmt.Fprintf(&b, "hand-over by %s\n", h)
	}
	for _, bl := range r.Blips {
		fmt.Fprintf(&b, "blip: %s\n", bl)
	}
	for _, st := range r.Stale {
		fmt.Fprintf(&b, "stale: %s\n", st)
	}
	for _, st := range r.Stalls {
		what, when := "host stall", "until"
		if st.Kind == EventClockStep {
			what, when = "clock step", "at" // the stamps after it moved back by it
		}
		fmt.Fprintf(&b, "%s: %s, %s %s\n", what, st.Detail, when, stamp(st.T))
	}
	fmt.Fprintf(&b, "counts: %s\n", counts(r.Counts))
	return b.String()
}

func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "(no heals)"
	}
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.Round(time.Millisecond).String()
	}
	return strings.Join(s, " ")
}

func counts(c map[string]int) string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	s := make([]string, len(keys))
	for i, k := range keys {
		s[i] = fmt.Sprintf("%s=%d", k, c[k])
	}
	return strings.Join(s, " ")
}

// reportJSON is the shape of report.json.
type reportJSON struct {
	OK         bool           `json:"ok"`
	Verdicts   []Verdict      `json:"verdicts"`
	LivenessNS []int64        `json:"liveness_ns"`
	Faults     []FaultSpan    `json:"faults,omitempty"`
	HandOvers  []HandOver     `json:"hand_overs,omitempty"`
	Blips      []Blip         `json:"blips,omitempty"`
	Stale      []Stale        `json:"stale,omitempty"`
	Stalls     []Event        `json:"stalls,omitempty"`
	Counts     map[string]int `json:"counts"`
}

// MarshalJSON encodes the report as report.json has it: "ok", "verdicts",
// "liveness_ns" (nanoseconds), "faults", "hand_overs", "blips", "stale"
// and "stalls" (if any) and "counts". It has a value receiver so
// that a Report encodes the same way with or without a pointer.
func (r Report) MarshalJSON() ([]byte, error) {
	ns := make([]int64, len(r.Liveness))
	for i, d := range r.Liveness {
		ns[i] = int64(d)
	}
	return json.Marshal(reportJSON{OK: r.OK(), Verdicts: r.Verdicts, LivenessNS: ns, Faults: r.Faults, HandOvers: r.HandOvers, Blips: r.Blips, Stale: r.Stale, Stalls: r.Stalls, Counts: r.Counts})
}

// WriteJSON writes the report, indented, to path (report.json in the run
// directory, say).
func (r *Report) WriteJSON(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("write report %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report %s: %w", path, err)
	}
	return nil
}
