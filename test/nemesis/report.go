//go:build nemesis

package nemesis

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tenurehq/tenure/test/nemesis/check"
)

// reportJSON is the shape of report.json: the run's schedule and what each
// step did, then the checker's report under "check".
type reportJSON struct {
	OK            bool          `json:"ok"`
	Unsettled     []string      `json:"unsettled,omitempty"`
	Seed          uint64        `json:"seed"`
	TTLMS         int64         `json:"ttl_ms"`
	Timing        string        `json:"timing"`
	ElectionBound int64         `json:"election_bound_ms"`
	BootMS        int64         `json:"boot_ms"`
	BootUnstable  string        `json:"boot_unstable,omitempty"`
	Steps         []stepJSON    `json:"steps"`
	Crashed       []string      `json:"crashed,omitempty"`
	StopErr       string        `json:"stop_error,omitempty"`
	ElapsedMS     int64         `json:"elapsed_ms"`
	LateRequests  int           `json:"late_requests"`
	Check         *check.Report `json:"check"`
}

type stepJSON struct {
	Kind     string  `json:"kind"`
	HoldMS   int64   `json:"hold_ms,omitempty"`
	Loss     float64 `json:"loss,omitempty"`
	DelayMS  int64   `json:"delay_ms,omitempty"`
	What     string  `json:"what"`
	StableMS int64   `json:"stable_ms"`
	Unstable string  `json:"unstable,omitempty"`
	Refused  string  `json:"refused,omitempty"`
}

// write writes report.json and summary.txt into the run directory.
func (r *Result) write(o RunOptions) error {
	rep := reportJSON{OK: r.OK(), Unsettled: r.Unsettled(), Seed: r.Seed, TTLMS: o.Cluster.TTL.Milliseconds(), Timing: cmp.Or(o.Cluster.Timing, "local"),
		ElectionBound: o.ElectionBound.Milliseconds(), BootMS: r.Boot.Milliseconds(), BootUnstable: r.BootUnstable,
		Crashed: r.Crashed, StopErr: r.StopErr, ElapsedMS: r.Elapsed.Milliseconds(), LateRequests: r.LateRequests, Check: r.Report}
	for _, s := range r.Steps {
		rep.Steps = append(rep.Steps, stepJSON{Kind: s.Step.Kind, HoldMS: s.Step.Hold.Milliseconds(), Loss: s.Step.Loss,
			DelayMS: s.Step.Delay.Milliseconds(), What: s.What, StableMS: s.Stable.Milliseconds(), Unstable: s.Unstable, Refused: s.Refused})
	}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("nemesis: report: %w", err)
	}
	if err := os.WriteFile(o.path(ReportFile), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("nemesis: report: %w", err)
	}
	if err := os.WriteFile(o.path(SummaryFile), []byte(r.Summary(o)), 0o644); err != nil {
		return fmt.Errorf("nemesis: summary: %w", err)
	}
	return nil
}

// Summary is the run for a reader: seed, faults, every verdict, the times
// to agree on a leader after each heal and the checker's liveness times.
func (r *Result) Summary(o RunOptions) string {
	var b strings.Builder
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "nemesis run: %s in %v (seed %d, %d steps, TTL %v, timing %s, election bound %v)\n", verdict,
		r.Elapsed.Round(time.Second), r.Seed, len(r.Plan), o.Cluster.TTL, cmp.Or(o.Cluster.Timing, "local"), o.ElectionBound)
	if len(o.Cluster.Broken) > 0 {
		fmt.Fprintf(&b, "broken build: TENURE_BROKEN=%s\n", strings.Join(o.Cluster.Broken, ","))
	}
	if len(o.Cluster.Ineligible) > 0 {
		fmt.Fprintf(&b, "--eligible=false: %s\n", strings.Join(o.Cluster.Ineligible, " "))
	}
	fmt.Fprintf(&b, "run dir: %s\n", o.Cluster.Dir)
	fmt.Fprintf(&b, "boot: %s\n", agreement(r.Boot, r.BootUnstable))
	for i, s := range r.Steps {
		fmt.Fprintf(&b, "step %2d: %-28s %-24s %s\n", i+1, s.Step, s.What, s.agreement())
		if s.Refused != "" {
			fmt.Fprintf(&b, "         refused: %s\n", s.Refused)
		}
	}
	for i := len(r.Steps); i < len(r.Plan); i++ {
		fmt.Fprintf(&b, "step %2d: %s: not run\n", i+1, r.Plan[i])
	}
	fmt.Fprintf(&b, "late peer requests refused by the agents: %d\n", r.LateRequests)
	for _, c := range r.Crashed {
		fmt.Fprintf(&b, "CRASHED: %s\n", c)
	}
	if r.StopErr != "" {
		fmt.Fprintf(&b, "STOP: %s\n", r.StopErr)
	}
	if u := r.Unsettled(); len(u) > 0 {
		fmt.Fprintf(&b, "UNSETTLED: no agreement on a leader after %s\n", strings.Join(u, ", "))
	}
	if r.Report != nil {
		b.WriteString(r.Report.String())
	} else {
		b.WriteString("not checked: the harness failed before the checker ran\n")
	}
	return b.String()
}

// Tally sums many runs' results: the last lines of a soak.
type Tally struct {
	Runs        int
	FailedSeeds []uint64
	// Faults counts the steps run, by kind; Unstable those after which the
	// agents did not agree on a leader within the wait; Refused the
	// operator's steps whose command the agent refused.
	Faults   map[string]int
	Unstable map[string]int
	Refused  map[string]int
	// Agree is the longest time to agree on a leader after a heal, by kind.
	Agree map[string]time.Duration
	// Liveness is every heal's time to a lease, as the checker measured.
	Liveness []time.Duration
	// Spans are the runs' faults with the longest time without a lease
	// in each, as the checker measured them, "seed N: " before What.
	Spans []check.FaultSpan
	// HandOvers are the operator's acts that moved leadership, as the
	// checker measured them.
	HandOvers []check.HandOver
	// Blips are the followers that lost a leader whose term went on, as
	// the checker found them.
	Blips []check.Blip
	// Stale are the followers that named a leader whose term had ended,
	// as the checker found them.
	Stale []check.Stale
	// Stalls are the runs' host stalls (check.EventStall), "seed N: detail".
	Stalls []string
	// ClockSteps are the runs' steps of the wall clock
	// (check.EventClockStep), "seed N: detail".
	ClockSteps []string
	// LateRequests sums the runs' Result.LateRequests.
	LateRequests int
	// Failed counts failed verdicts by check name, and runs with a step
	// that did not settle under "settle".
	Failed map[string]int
}

// Add counts one run.
func (t *Tally) Add(r *Result) {
	if t.Faults == nil {
		t.Faults, t.Unstable, t.Refused, t.Agree, t.Failed = map[string]int{}, map[string]int{}, map[string]int{}, map[string]time.Duration{}, map[string]int{}
	}
	t.Runs++
	t.LateRequests += r.LateRequests
	if !r.OK() {
		t.FailedSeeds = append(t.FailedSeeds, r.Seed)
	}
	if len(r.Unsettled()) > 0 {
		t.Failed["settle"]++
	}
	for _, s := range r.Steps {
		t.Faults[s.Step.Kind]++
		t.Agree[s.Step.Kind] = max(t.Agree[s.Step.Kind], s.Stable)
		if s.Unstable != "" {
			t.Unstable[s.Step.Kind]++
		}
		if s.Refused != "" {
			t.Refused[s.Step.Kind]++
		}
	}
	if r.Report != nil {
		t.Liveness = append(t.Liveness, r.Report.Liveness...)
		for _, f := range r.Report.Faults {
			f.What = fmt.Sprintf("seed %d: %s", r.Seed, f.What)
			t.Spans = append(t.Spans, f)
		}
		t.HandOvers = append(t.HandOvers, r.Report.HandOvers...)
		t.Blips = append(t.Blips, r.Report.Blips...)
		t.Stale = append(t.Stale, r.Report.Stale...)
		for _, st := range r.Report.Stalls {
			line := fmt.Sprintf("seed %d: %s", r.Seed, st.Detail)
			if st.Kind == check.EventClockStep {
				t.ClockSteps = append(t.ClockSteps, line)
			} else {
				t.Stalls = append(t.Stalls, line)
			}
		}
		for _, v := range r.Report.Verdicts {
			if !v.OK {
				t.Failed[v.Name]++
			}
		}
	}
}

// String is the tally for a reader.
func (t *Tally) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d runs, %d failed", t.Runs, len(t.FailedSeeds))
	if len(t.FailedSeeds) > 0 {
		fmt.Fprintf(&b, " (seeds %v; failed checks %v)", t.FailedSeeds, t.Failed)
	}
	b.WriteString("\nfault              steps  no agreement  refused  longest time to agree after the heal\n")
	for _, k := range slices.Sorted(maps.Keys(t.Faults)) {
		fmt.Fprintf(&b, "%-18s %5d  %12d  %7d  %v\n", k, t.Faults[k], t.Unstable[k], t.Refused[k], t.Agree[k].Round(time.Millisecond))
	}
	if n := len(t.Liveness); n > 0 {
		l := slices.Sorted(slices.Values(t.Liveness))
		held := 0
		for _, d := range l {
			if d == 0 {
				held++
			}
		}
		fmt.Fprintf(&b, "liveness: %d heals, a lease held through %d; time to a lease: median %v, 90th %v, max %v\n",
			n, held, l[n/2].Round(time.Millisecond), l[n*9/10].Round(time.Millisecond), l[n-1].Round(time.Millisecond))
	}
	writeSpans(&b, t.Spans)
	writeHandOvers(&b, t.HandOvers)
	writeBlips(&b, t.Blips)
	writeStale(&b, t.Stale)
	fmt.Fprintf(&b, "peer requests the agents refused as late (after their callers gave up): %d\n", t.LateRequests)
	if len(t.Stalls) > 0 {
		fmt.Fprintf(&b, "host stalls (every process stopped; checks near one may fail for it): %s\n", strings.Join(t.Stalls, "; "))
	}
	if len(t.ClockSteps) > 0 {
		fmt.Fprintf(&b, "wall clock steps (the checker moved the stamps after a forward one back by it): %s\n", strings.Join(t.ClockSteps, "; "))
	}
	return b.String()
}

// writeSpans sums the time without a lease during faults and operator's
// acts: those that left a majority of the voters connected (judged by
// I5) and the others, with the longest of each and the fault it was in.
func writeSpans(b *strings.Builder, spans []check.FaultSpan) {
	var quorate, other []check.FaultSpan
	for _, f := range spans {
		if f.Quorate != 0 {
			quorate = append(quorate, f)
		} else {
			other = append(other, f)
		}
	}
	sum := func(fs []check.FaultSpan, what string) {
		if len(fs) == 0 {
			return
		}
		worst := slices.MaxFunc(fs, func(a, b check.FaultSpan) int { return cmp.Compare(a.Leaderless, b.Leaderless) })
		fmt.Fprintf(b, "during %d faults and acts %s: at most %v without a lease (%s)\n",
			len(fs), what, worst.Leaderless.Round(time.Millisecond), worst.What)
	}
	sum(quorate, "that left a majority of the voters connected")
	sum(other, "that did not")
}

// writeBlips counts the followers' blips with no fault on and under one,
// with the longest of each.
func writeBlips(b *strings.Builder, bs []check.Blip) {
	writeByFault(b, "followers that said \"no leader\" while their leader's term went on", bs,
		func(bl check.Blip) (time.Duration, bool) { return bl.Gap, bl.Faulted })
}

// writeStale counts the followers that named a leader whose term had
// ended, with no fault on and under one, with the longest of each.
func writeStale(b *strings.Builder, ss []check.Stale) {
	writeByFault(b, fmt.Sprintf("followers that named a leader %v or more after its term ended", check.MinStale), ss,
		func(s check.Stale) (time.Duration, bool) { return s.For, s.Faulted })
}

// writeByFault writes the line label: how many of items came with no
// fault on and under one, and the longest of each (each item's duration
// and whether a fault was on, as of returns them).
func writeByFault[T any](b *strings.Builder, label string, items []T, of func(T) (time.Duration, bool)) {
	var calm, faulted []time.Duration
	for _, it := range items {
		if d, f := of(it); f {
			faulted = append(faulted, d)
		} else {
			calm = append(calm, d)
		}
	}
	longest := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return ""
		}
		return fmt.Sprintf(" (longest %v)", slices.Max(ds).Round(time.Millisecond))
	}
	fmt.Fprintf(b, "%s: %d with no fault on%s, %d under a fault%s\n", label, len(calm), longest(calm), len(faulted), longest(faulted))
}

// refusedLabel ends the tally's label of acts the agent refused.
const refusedLabel = " (refused)"

// writeHandOvers sums the hand-overs by act (stop, drain, transfer,
// resign) and by whether a fault was on: how many, and the time
// from the act to the next node's lease at the median and at most. Acts
// the agent refused are counted only: it handed nothing over, and the
// time to a next lease, if one came, is some later event's.
func writeHandOvers(b *strings.Builder, hs []check.HandOver) {
	if len(hs) == 0 {
		return
	}
	groups := map[string][]time.Duration{}
	for _, h := range hs {
		act := strings.Fields(strings.TrimPrefix(h.Act, "tenure "))[0]
		if h.Faulted {
			act += " under a fault"
		}
		switch {
		case h.Refused:
			act += refusedLabel
		case h.To == "":
			act += " (no successor before the end)"
		case h.To == h.From:
			act += " (led again by its node)"
		}
		groups[act] = append(groups[act], h.Gap)
	}
	b.WriteString("hand-overs by an operator's act, from the act to the next node's lease:\n")
	acts := slices.Sorted(maps.Keys(groups))
	width := len(slices.MaxFunc(acts, func(a, b string) int { return len(a) - len(b) }))
	for _, act := range acts {
		g := slices.Sorted(slices.Values(groups[act]))
		if strings.HasSuffix(act, refusedLabel) {
			fmt.Fprintf(b, "  %-*s %3d  nothing handed over\n", width, act, len(g))
			continue
		}
		fmt.Fprintf(b, "  %-*s %3d  median %v, max %v\n", width, act, len(g), g[len(g)/2].Round(time.Millisecond), g[len(g)-1].Round(time.Millisecond))
	}
}
