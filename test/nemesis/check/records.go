package check

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Journal events, the values of JournalRecord.Event.
const (
	JournalStart  = "start"  // the agent process started
	JournalLead   = "lead"   // the node became leader of Epoch, valid until Until
	JournalExtend = "extend" // its lease for Epoch was renewed, valid until Until
	JournalEnd    = "end"    // it stopped believing it leads Epoch
)

// JournalRecord is one line of journal-<node>.jsonl, written by an agent
// (tenure agent --journal) and appended across its restarts.
type JournalRecord struct {
	T     int64  `json:"t"`     // Unix nanoseconds
	Node  string `json:"node"`  // the agent's node name
	Event string `json:"event"` // JournalStart, JournalLead, JournalExtend or JournalEnd
	Epoch uint64 `json:"epoch"` // the term (0 for start)
	Until int64  `json:"until"` // lead, extend: the lease is believed valid until then
}

// Operation kinds and results, the values of Op.Op and Op.Result.
const (
	OpWrite = "write"
	OpRead  = "read"

	ResultOK      = "ok"      // write accepted (200), or read returned a value (200)
	ResultStale   = "stale"   // write refused for its token (409)
	ResultAbsent  = "absent"  // read found nothing written (404)
	ResultUnknown = "unknown" // no answer or another status: it may or may not have taken effect
)

// Op is one line of history-<node>.jsonl, one completed operation of a
// writer (test/nemesis/writer) against the fenced store.
type Op struct {
	Node   string `json:"node"`
	PID    int    `json:"pid"`
	Op     string `json:"op"`     // OpWrite or OpRead
	Epoch  uint64 `json:"epoch"`  // write: the writer's token; read: the token of the value read
	Value  string `json:"value"`  // write: the value sent; read: the value read
	Invoke int64  `json:"invoke"` // Unix nanoseconds
	Return int64  `json:"return"` // Unix nanoseconds; 0 when Result is ResultUnknown
	Result string `json:"result"` // ResultOK, ResultStale, ResultAbsent or ResultUnknown
}

// Event kinds, the values of Event.Kind, written by the fault harness.
const (
	EventKill       = "kill"        // SIGKILL of the nodes' agents
	EventStart      = "start"       // the nodes' agents started
	EventPause      = "pause"       // SIGSTOP of the agent process only
	EventResume     = "resume"      // SIGCONT of the agent process only
	EventPauseHost  = "pause-host"  // SIGSTOP of the agent, its tenure run and its writer
	EventResumeHost = "resume-host" // SIGCONT of the same
	EventPartition  = "partition"   // a network partition, described by Detail
	EventHeal       = "heal"        // every fault undone, all agents running and connected
	EventWipe       = "wipe"        // the nodes' data dirs wiped before a start
	EventEnd        = "end"         // the run ends; liveness is not measured after it
	EventDiskFull   = "disk-full"   // the nodes' data dirs full: their writes fail
	EventDiskFreed  = "disk-freed"  // the same made writable again
	// EventStop is a SIGTERM of the nodes' agents: a graceful leave, in
	// which a leader hands its term over. Unlike a kill it cuts no
	// interval: the agent must end its term in its journal before it
	// lets the lease go.
	EventStop = "stop"
	// EventOperator is an operator's command against the node's agent,
	// Detail the command line (tenure drain, transfer, resign).
	EventOperator = "operator"
	// EventRefused says the agent refused the operator's command of the
	// same node and Detail recorded before it (it exited non-zero).
	EventRefused = "refused"
	// EventStall says the harness itself ran nothing for a while, Detail
	// how long, ending at T: the host stalled every process (or the
	// harness alone). Not a fault the schedule injected: reported, not
	// excused.
	EventStall = "stall"
	// EventClockStep says the host's wall clock moved Step nanoseconds
	// further than its monotonic clock between two of the harness's looks,
	// the later at T (a clock set by hand or by time synchronisation, or a
	// virtual machine resumed whose clock was then corrected). The agents
	// time their leases on the monotonic clock, but every record stamps
	// the wall clock, so Load moves the stamps taken after a forward step
	// back by it (Run.unstep); a step back cannot be undone that way (the
	// stamps before and after it overlap) and is reported only.
	EventClockStep = "clock-step"
	// EventQuorate says the fault just begun left the voters Nodes, a
	// majority of the roster's, up and connected with each other: from
	// here to the next heal a leader must follow within the liveness
	// bound of any moment without one (I5), not only after the heal.
	EventQuorate = "quorate"
)

var eventKinds = []string{EventKill, EventStart, EventPause, EventResume, EventPauseHost,
	EventResumeHost, EventPartition, EventHeal, EventWipe, EventEnd, EventStop, EventOperator, EventRefused,
	EventDiskFull, EventDiskFreed, EventStall, EventClockStep, EventQuorate}

// Event is one line of events.jsonl, a fault the harness injected or undid.
type Event struct {
	T      int64    `json:"t"` // Unix nanoseconds
	Kind   string   `json:"kind"`
	Nodes  []string `json:"nodes,omitempty"`
	Detail string   `json:"detail,omitempty"`
	Step   int64    `json:"step,omitempty"` // EventClockStep: nanoseconds the wall clock stepped
}

// Run is everything a run directory holds, each list sorted by time.
type Run struct {
	Journal []JournalRecord // all nodes' journals, by T
	History []Op            // all nodes' operations, by Invoke
	Events  []Event         // by T
	Views   []View          // all nodes' watch streams, by T
}

// ReadJournal reads one journal file. A final line cut short (the agent
// was killed while writing it) is ignored; any other malformed line is an
// error.
func ReadJournal(path string) ([]JournalRecord, error) {
	recs, err := readLines(path, validJournal)
	if err != nil {
		return nil, fmt.Errorf("read journal %s: %w", path, err)
	}
	return recs, nil
}

// ReadHistory reads one writer history file, with the same tolerance of a
// cut-short final line as ReadJournal.
func ReadHistory(path string) ([]Op, error) {
	ops, err := readLines(path, validOp)
	if err != nil {
		return nil, fmt.Errorf("read history %s: %w", path, err)
	}
	return ops, nil
}

// ReadEvents reads the harness's events file, with the same tolerance of a
// cut-short final line as ReadJournal.
func ReadEvents(path string) ([]Event, error) {
	evs, err := readLines(path, validEvent)
	if err != nil {
		return nil, fmt.Errorf("read events %s: %w", path, err)
	}
	return evs, nil
}

// Load reads a run directory: every journal-<node>.jsonl (at least one),
// every history-<node>.jsonl (none is allowed: a run without writers),
// events.jsonl (required) and every watch-<node>.jsonl (none is allowed).
// Each journal and history record must name the node its file is named
// after.
func Load(dir string) (*Run, error) {
	run := &Run{}
	var err error
	if run.Journal, err = loadPerNode(dir, "journal", ReadJournal, func(r JournalRecord) string { return r.Node }); err != nil {
		return nil, err
	}
	if len(run.Journal) == 0 {
		return nil, fmt.Errorf("load %s: no journal records in journal-*.jsonl", dir)
	}
	if run.History, err = loadPerNode(dir, "history", ReadHistory, func(o Op) string { return o.Node }); err != nil {
		return nil, err
	}
	if run.Events, err = ReadEvents(filepath.Join(dir, "events.jsonl")); err != nil {
		return nil, err
	}
	if run.Views, err = loadViews(dir); err != nil {
		return nil, err
	}
	run.unstep()
	run.sort()
	return run, nil
}

// unstep moves every stamp taken after a forward step of the wall clock
// (EventClockStep) back by the step, latest step first, so that the
// records read as the monotonic clock the agents time their leases on
// would have stamped them. A step of D seen at T (in the clock after it)
// happened after T-D-(the harness's look interval) in the clock before
// it and no later than T in the clock after, so a stamp up to T-D was
// taken before the step and one above it after (the harness records a
// step only when it is longer than the look interval, so the two ranges
// do not meet). A journal record's Until moves with its T: it was
// computed from the clock of its time.
func (r *Run) unstep() {
	for _, st := range slices.Backward(eventsOf(r.Events, EventClockStep)) {
		if st.Step <= 0 {
			continue
		}
		after := st.T - st.Step
		back := func(t *int64) {
			if *t > after {
				*t -= st.Step
			}
		}
		for i := range r.Journal {
			if j := &r.Journal[i]; j.T > after {
				j.T -= st.Step
				if j.Until != 0 {
					j.Until -= st.Step
				}
			}
		}
		for i := range r.History {
			o := &r.History[i]
			back(&o.Invoke)
			if o.Return != 0 {
				back(&o.Return)
			}
		}
		for i := range r.Events {
			back(&r.Events[i].T)
		}
		for i := range r.Views {
			back(&r.Views[i].T)
		}
	}
}

// sort orders each list by time, keeping the file order of equal times.
func (r *Run) sort() {
	slices.SortStableFunc(r.Journal, func(a, b JournalRecord) int { return cmpInt(a.T, b.T) })
	slices.SortStableFunc(r.History, func(a, b Op) int { return cmpInt(a.Invoke, b.Invoke) })
	slices.SortStableFunc(r.Events, func(a, b Event) int { return cmpInt(a.T, b.T) })
	slices.SortStableFunc(r.Views, func(a, b View) int { return cmpInt(a.T, b.T) })
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// loadPerNode reads every <prefix>-<node>.jsonl in dir with read and checks
// that each record names node.
func loadPerNode[T any](dir, prefix string, read func(string) ([]T, error), node func(T) string) ([]T, error) {
	paths, err := filepath.Glob(filepath.Join(dir, prefix+"-*.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	var all []T
	for _, path := range paths {
		want := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), prefix+"-"), ".jsonl")
		recs, err := read(path)
		if err != nil {
			return nil, err
		}
		for i, r := range recs {
			if got := node(r); got != want {
				return nil, fmt.Errorf("load %s: record %d names node %q, not %q", path, i+1, got, want)
			}
		}
		all = append(all, recs...)
	}
	return all, nil
}

// readLines decodes path as one JSON object per line, each checked by
// valid. A last line without its newline that does not decode was cut
// short by a kill and is dropped.
func readLines[T any](path string, valid func(*T) error) ([]T, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := bytes.Split(data, []byte("\n"))
	partial := lines[len(lines)-1] // "" when the file ends with a newline
	lines = lines[:len(lines)-1]
	var out []T
	for i, line := range lines {
		rec, err := decodeLine(line, valid)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		out = append(out, rec)
	}
	if len(partial) > 0 {
		var rec T
		if json.Unmarshal(partial, &rec) == nil { // whole but for its newline
			if err := valid(&rec); err != nil {
				return nil, fmt.Errorf("line %d: %w", len(lines)+1, err)
			}
			out = append(out, rec)
		}
	}
	return out, nil
}

func decodeLine[T any](line []byte, valid func(*T) error) (T, error) {
	var rec T
	if err := json.Unmarshal(line, &rec); err != nil {
		return rec, fmt.Errorf("malformed %q: %w", excerpt(line), err)
	}
	if err := valid(&rec); err != nil {
		return rec, fmt.Errorf("%w: %q", err, excerpt(line))
	}
	return rec, nil
}

func excerpt(line []byte) string {
	const max = 120
	if len(line) > max {
		return string(line[:max]) + "…"
	}
	return string(line)
}

var errNoTime = errors.New("no time")

func validJournal(r *JournalRecord) error {
	switch {
	case r.T <= 0:
		return errNoTime
	case r.Node == "":
		return errors.New("no node")
	case !slices.Contains([]string{JournalStart, JournalLead, JournalExtend, JournalEnd}, r.Event):
		return fmt.Errorf("unknown journal event %q", r.Event)
	case (r.Event == JournalLead || r.Event == JournalExtend) && r.Until <= 0:
		return fmt.Errorf("%s without until", r.Event)
	}
	return nil
}

func validOp(o *Op) error {
	switch {
	case o.Invoke <= 0:
		return errors.New("no invoke time")
	case o.Node == "":
		return errors.New("no node")
	case o.Op != OpWrite && o.Op != OpRead:
		return fmt.Errorf("unknown op %q", o.Op)
	}
	return validResult(o)
}

func validResult(o *Op) error {
	ok := []string{ResultOK, ResultUnknown, ResultStale}
	if o.Op == OpRead {
		ok = []string{ResultOK, ResultUnknown, ResultAbsent}
	}
	switch {
	case !slices.Contains(ok, o.Result):
		return fmt.Errorf("result %q of a %s", o.Result, o.Op)
	case o.Result != ResultUnknown && o.Return < o.Invoke:
		return fmt.Errorf("returned at %d before its invoke at %d", o.Return, o.Invoke)
	}
	return nil
}

func validEvent(e *Event) error {
	switch {
	case e.T <= 0:
		return errNoTime
	case !slices.Contains(eventKinds, e.Kind):
		return fmt.Errorf("unknown event kind %q (known: %s)", e.Kind, strings.Join(eventKinds, ", "))
	}
	return nil
}
