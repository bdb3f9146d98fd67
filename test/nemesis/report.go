//go:build nemesis

package nemesis

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/tenurehq/tenure/test/nemesis/check"
)

// reportJSON is the shape of report.json: the run's schedule and what each
// step did, then the checker's report under "check".
type reportJSON struct {
	OK            bool          `json:"ok"`
	Seed          uint64        `json:"seed"`
	TTLMS         int64         `json:"ttl_ms"`
	ElectionBound int64         `json:"election_bound_ms"`
	BootMS        int64         `json:"boot_ms"`
	BootUnstable  string        `json:"boot_unstable,omitempty"`
	Steps         []stepJSON    `json:"steps"`
	Crashed       []string      `json:"crashed,omitempty"`
	StopErr       string        `json:"stop_error,omitempty"`
	ElapsedMS     int64         `json:"elapsed_ms"`
	Check         *check.Report `json:"check"`
}

type stepJSON struct {
	Kind     string  `json:"kind"`
	HoldMS   int64   `json:"hold_ms,omitempty"`
	Loss     float64 `json:"loss,omitempty"`
	What     string  `json:"what"`
	StableMS int64   `json:"stable_ms"`
	Unstable string  `json:"unstable,omitempty"`
}

// write writes report.json and summary.txt into the run directory.
func (r *Result) write(o RunOptions) error {
	rep := reportJSON{OK: r.OK(), Seed: r.Seed, TTLMS: o.Cluster.TTL.Milliseconds(),
		ElectionBound: o.ElectionBound.Milliseconds(), BootMS: r.Boot.Milliseconds(), BootUnstable: r.BootUnstable,
		Crashed: r.Crashed, StopErr: r.StopErr, ElapsedMS: r.Elapsed.Milliseconds(), Check: r.Report}
	for _, s := range r.Steps {
		rep.Steps = append(rep.Steps, stepJSON{Kind: s.Step.Kind, HoldMS: s.Step.Hold.Milliseconds(), Loss: s.Step.Loss,
			What: s.What, StableMS: s.Stable.Milliseconds(), Unstable: s.Unstable})
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
	fmt.Fprintf(&b, "nemesis run: %s in %v (seed %d, %d steps, TTL %v, election bound %v)\n", verdict,
		r.Elapsed.Round(time.Second), r.Seed, len(r.Plan), o.Cluster.TTL, o.ElectionBound)
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
	}
	for i := len(r.Steps); i < len(r.Plan); i++ {
		fmt.Fprintf(&b, "step %2d: %s: not run\n", i+1, r.Plan[i])
	}
	for _, c := range r.Crashed {
		fmt.Fprintf(&b, "CRASHED: %s\n", c)
	}
	if r.StopErr != "" {
		fmt.Fprintf(&b, "STOP: %s\n", r.StopErr)
	}
	if r.Report != nil {
		b.WriteString(r.Report.String())
	} else {
		b.WriteString("not checked: the harness failed before the checker ran\n")
	}
	return b.String()
}
