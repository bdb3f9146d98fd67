package check

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/anishathalye/porcupine"
)

// Options configures one check. The caller's struct is copied, never
// written.
type Options struct {
	// TTL is the agents' --lease-ttl. Required.
	TTL time.Duration
	// ElectionBound is the rest of the liveness budget: after each heal a
	// node must hold a valid lease within TTL+ElectionBound.
	ElectionBound time.Duration
	// ResumeGrace excuses, for I3, writes invoked within it after a
	// resume-host of the writer's node; 0 means DefaultResumeGrace.
	ResumeGrace time.Duration
	// StopGrace excuses, for I3, writes invoked within it after the
	// writer's term was cut short (an end record, a restart or a kill of
	// its agent) while the lease the node believed in still ran: the time
	// `tenure run` takes to stop its child after a step-down. 0, the
	// default, excuses none: the brief's strict rule.
	StopGrace time.Duration
	// CheckTimeout bounds porcupine's search; 0 means DefaultCheckTimeout.
	// A search that times out fails I4-linearizable.
	CheckTimeout time.Duration
}

// DefaultResumeGrace is Options.ResumeGrace when left 0.
const DefaultResumeGrace = time.Second

// VisualizationFile is the porcupine visualization Dir writes into the run
// directory when I4-linearizable fails.
const VisualizationFile = "linearizability.html"

// Validate reports options no run can be checked with.
func (o Options) Validate() error {
	switch {
	case o.TTL <= 0:
		return errors.New("check: TTL must be positive")
	case o.ElectionBound < 0 || o.ResumeGrace < 0 || o.StopGrace < 0 || o.CheckTimeout < 0:
		return errors.New("check: negative ElectionBound, ResumeGrace, StopGrace or CheckTimeout")
	}
	return nil
}

func (o Options) resumeGrace() time.Duration {
	if o.ResumeGrace == 0 {
		return DefaultResumeGrace
	}
	return o.ResumeGrace
}

func (o Options) checkTimeout() time.Duration {
	if o.CheckTimeout == 0 {
		return DefaultCheckTimeout
	}
	return o.CheckTimeout
}

// Dir reads the run directory (see Load) and runs every check. When
// I4-linearizable fails it writes VisualizationFile into dir and names it
// in the verdict. It does not write report.json: see Report.WriteJSON.
func Dir(dir string, opt Options) (*Report, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	run, err := Load(dir)
	if err != nil {
		return nil, err
	}
	rep, lin := check(run, opt)
	if lin.result != porcupine.Ok {
		addVisualization(rep, lin, filepath.Join(dir, VisualizationFile))
	}
	return rep, nil
}

// Check runs every check on a loaded run (its lists sorted by time, as
// Load leaves them). It writes no file.
func Check(run *Run, opt Options) (*Report, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	rep, _ := check(run, opt)
	return rep, nil
}

func check(run *Run, opt Options) (*Report, linearization) {
	iv := Beliefs(run.Journal, run.Events)
	children, cc := CheckChildren(run.History, iv, run.Events, opt)
	lin, l := checkLinearizable(run.History, opt.checkTimeout())
	end := runEnd(run)
	spans := FaultSpans(iv, run.Events, end)
	live, waits := CheckLiveness(iv, run.Events, spans, opt.TTL+opt.ElectionBound, end)
	hand := HandOvers(iv, run.Events, end)
	rep := &Report{
		Verdicts:  []Verdict{CheckOneLease(iv), CheckEpochs(run.Journal), children, lin, CheckMonotone(run.History), live, CheckHandOvers(hand)},
		Liveness:  waits,
		Faults:    spans,
		HandOvers: hand,
		Blips:     Blips(run.Views, iv, run.Events),
		Stale:     StaleViews(run.Views, iv, run.Events, end, MinStale),
		Stalls:    eventsOf(run.Events, EventStall, EventClockStep),
		Counts:    runCounts(run),
	}
	rep.Counts["excused-writes"] = cc.Excused
	rep.Counts["grace-writes"] = cc.Graced
	rep.Counts["heals"] = len(waits)
	return rep, l
}

// addVisualization writes porcupine's visualization to path and says so
// in the linearizability verdict.
func addVisualization(rep *Report, lin linearization, path string) {
	note := "visualization: " + path
	if err := porcupine.VisualizePath(registerModel, lin.info, path); err != nil {
		note = fmt.Sprintf("no visualization: %v", err)
	}
	for i := range rep.Verdicts {
		if rep.Verdicts[i].Name == NameLinearizable {
			rep.Verdicts[i].Details = append(rep.Verdicts[i].Details, note)
		}
	}
}

// countNames are the counts every report carries, 0 or not.
var countNames = []string{"terms", "writes-ok", "writes-stale", "writes-unknown", "writes-unrecorded",
	"reads", "reads-unknown", "kills", "pauses", "pause-hosts", "partitions", "heals", "starts", "wipes",
	"stops", "operator-commands", "excused-writes", "grace-writes", "disk-fulls", "stalls", "clock-steps"}

// runCounts measures the run's terms, operations and faults.
func runCounts(run *Run) map[string]int {
	c := make(map[string]int)
	for _, name := range countNames {
		c[name] = 0
	}
	for _, r := range run.Journal {
		if r.Event == JournalLead {
			c["terms"]++
		}
	}
	for _, o := range run.History {
		switch {
		case o.Op == OpWrite:
			c["writes-"+o.Result]++
		case o.Result == ResultUnknown:
			c["reads"]++
			c["reads-unknown"]++
		default:
			c["reads"]++
		}
	}
	c["writes-unrecorded"] = countUnrecorded(run.History)
	countFaults(c, run.Events)
	return c
}

// countFaults counts node faults (a kill of two nodes counts two) and
// partitions.
func countFaults(c map[string]int, events []Event) {
	perNode := map[string][]string{EventKill: {"kills"}, EventPause: {"pauses"},
		EventPauseHost: {"pauses", "pause-hosts"}, EventStart: {"starts"}, EventWipe: {"wipes"},
		EventStop: {"stops"}, EventOperator: {"operator-commands"}, EventDiskFull: {"disk-fulls"}}
	for _, e := range events {
		for _, name := range perNode[e.Kind] {
			c[name] += len(e.Nodes)
		}
		switch e.Kind {
		case EventPartition:
			c["partitions"]++
		case EventStall:
			c["stalls"]++
		case EventClockStep:
			c["clock-steps"]++
		}
	}
}
