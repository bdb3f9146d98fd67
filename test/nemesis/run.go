//go:build nemesis

package nemesis

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/tenurehq/tenure/test/nemesis/check"
)

// Bounds of a run.
const (
	// BootWait bounds the wait for the first leader after the agents start
	// (an --expect bootstrap, then the first election).
	BootWait = 60 * time.Second
	// stableSlack is added to the liveness bound when waiting for the
	// agents to agree again after a heal: liveness is the checker's to
	// judge; the harness only must not start the next fault too soon.
	stableSlack = 5 * time.Second
)

// RunOptions describe one run: a cluster, a plan, and how to judge it.
type RunOptions struct {
	Cluster Config
	// Seed is the seed the plan was drawn from (0 for a fixed scenario).
	Seed uint64
	Plan []Step
	// ElectionBound is check.Options.ElectionBound: after each heal a
	// node must hold a lease within TTL+ElectionBound.
	ElectionBound time.Duration
}

// Result is what a run did and what the checker said of it.
type Result struct {
	Seed uint64
	Plan []Step
	// Dir is the run directory (RunOptions.Cluster.Dir).
	Dir string
	// Boot is the time from the agents' start to a leader all agree on.
	Boot         time.Duration
	BootUnstable string
	Steps        []StepResult
	// Crashed lists processes that exited on their own, and StopErr what
	// went wrong stopping the cluster: both fail the run.
	Crashed []string
	StopErr string
	// Report is the checker's verdict; nil if the run did not get so far.
	Report  *check.Report
	Elapsed time.Duration
	// LateRequests counts the peer requests the agents refused because
	// they came after their callers had given up (from their logs; a
	// lower bound, measured only).
	LateRequests int
}

// OK reports whether every check passed, no process failed, and the
// agents agreed on a leader after the boot and after every step.
func (r *Result) OK() bool {
	return r.Report != nil && r.Report.OK() && len(r.Crashed) == 0 && r.StopErr == "" && len(r.Unsettled()) == 0
}

// Unsettled names the boot and the steps after which the running agents
// did not agree on a leader within the wait. Every step ends with the
// network whole and every agent undrained and running (but for the one a
// crash-leader step leaves down), so the running agents must agree again
// within the liveness bound (plus stableSlack): a step that does not
// settle is a defect even when every check passes (a node that counts a
// live member as gone, or keeps following a leader that no longer leads).
func (r *Result) Unsettled() []string {
	var out []string
	if r.BootUnstable != "" {
		out = append(out, "boot")
	}
	for i, s := range r.Steps {
		if s.Unstable != "" {
			out = append(out, fmt.Sprintf("step %d", i+1))
		}
	}
	return out
}

// Options is what the checker is told about the run: the agents' TTL,
// the election bound, and as StopGrace `tenure run --grace`, the time the
// supervisor is given to stop its writer after a step-down.
func (o RunOptions) Options() check.Options {
	return check.Options{TTL: o.Cluster.TTL, ElectionBound: o.ElectionBound, StopGrace: RunGrace}
}

// Run starts a cluster in o.Cluster.Dir, runs the plan, stops the cluster,
// checks the run directory and writes report.json and summary.txt there.
// The error is for a harness that could not do its part; the checker's
// verdicts are in the result.
func Run(o RunOptions) (*Result, error) {
	begin := time.Now()
	res := &Result{Seed: o.Seed, Plan: o.Plan, Dir: o.Cluster.Dir}
	err := run(o, res)
	res.Elapsed = time.Since(begin)
	if err == nil {
		res.Report, err = check.Dir(o.Cluster.Dir, o.Options())
	}
	if err == nil {
		res.LateRequests, err = countLateRequests(o.Cluster.Dir)
	}
	if werr := res.write(o); err == nil {
		err = werr
	}
	return res, err
}

func run(o RunOptions, res *Result) (err error) {
	c, err := Start(o.Cluster)
	if err != nil {
		return err
	}
	defer func() {
		res.Crashed = append(res.Crashed, c.Crashed()...)
		if serr := c.Stop(); serr != nil {
			res.StopErr = serr.Error()
		}
	}()
	res.Boot, res.BootUnstable = c.WaitStable(BootWait)
	log := c.cfg.Logger
	log.Info("boot: " + agreement(res.Boot, res.BootUnstable))
	bound := o.Cluster.TTL + o.ElectionBound
	lastHeal := time.Now()
	for i, s := range o.Plan {
		if crashed := c.Crashed(); len(crashed) > 0 {
			return fmt.Errorf("nemesis: before step %d: %v", i+1, crashed)
		}
		r, err := c.RunStep(s)
		if err != nil {
			return fmt.Errorf("nemesis: step %d (%s): %w", i+1, s, err)
		}
		lastHeal = time.Now()
		r.Stable, r.Unstable = c.WaitStable(bound + stableSlack)
		if r.Refused != "" {
			log.Warn(fmt.Sprintf("step %d: refused: %s", i+1, r.Refused))
		}
		log.Info(fmt.Sprintf("step %d: %s (%s); %s", i+1, s, r.What, r.agreement()))
		res.Steps = append(res.Steps, r)
		time.Sleep(2 * o.Cluster.TTL) // settle: renewals, a preemption by a returning higher node
	}
	// Leave the last heal the whole liveness bound before the end.
	if rest := bound + o.Cluster.TTL - time.Since(lastHeal); rest > 0 {
		time.Sleep(rest)
	}
	return nil
}

// ReportFile and SummaryFile are what Run writes into the run directory.
const (
	ReportFile  = "report.json"
	SummaryFile = "summary.txt"
)

// path joins the run directory and name.
func (o RunOptions) path(name string) string { return filepath.Join(o.Cluster.Dir, name) }

// agreement says how long the agents took to agree on a leader, or that
// they did not.
func agreement(d time.Duration, unstable string) string {
	if unstable != "" {
		return fmt.Sprintf("no agreement within %v: %s", d.Round(time.Millisecond), unstable)
	}
	return fmt.Sprintf("all agreed on a leader after %v", d.Round(time.Millisecond))
}

func (r StepResult) agreement() string { return agreement(r.Stable, r.Unstable) }
