package check

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// View is one leadership line of watch-<node>.jsonl: what a node's agent
// told `tenure watch --json` about the leader it knows. Member and task
// events are not read.
type View struct {
	T      int64  // Unix nanoseconds, the agent's time of the event
	Node   string // the reporting node (from the file's name)
	Event  string // leader-changed, became-leader, lost-leadership or no-leader
	Leader string // the leader known after the event, "" when none
	Epoch  uint64 // Leader's term, 0 when none
	Forgot string // on no-leader: the leader forgotten and why, as the agent says
}

// watchLine is the JSON of one `tenure watch --json` line, as
// docs/PROTOCOL.md gives it (this package shares no code with the agent).
type watchLine struct {
	Time   string `json:"time"`
	Event  string `json:"event"`
	Leader *struct {
		Node  string `json:"node"`
		Epoch uint64 `json:"epoch"`
	} `json:"leader"`
	Forgot string `json:"forgot"`
}

// The watch events that say which leader a node knows.
var leadershipEvents = []string{"leader-changed", "became-leader", "lost-leadership", "no-leader"}

// ReadViews reads one watch file of node, with the same tolerance of a
// cut-short final line as ReadJournal, keeping its leadership events.
func ReadViews(path, node string) ([]View, error) {
	lines, err := readLines(path, validWatchLine)
	if err != nil {
		return nil, fmt.Errorf("read watch %s: %w", path, err)
	}
	var out []View
	for _, l := range lines {
		if !slices.Contains(leadershipEvents, l.Event) {
			continue
		}
		t, _ := time.Parse(time.RFC3339Nano, l.Time) // validWatchLine parsed it
		v := View{T: t.UnixNano(), Node: node, Event: l.Event, Forgot: l.Forgot}
		if l.Leader != nil {
			v.Leader, v.Epoch = l.Leader.Node, l.Leader.Epoch
		}
		out = append(out, v)
	}
	return out, nil
}

func validWatchLine(l *watchLine) error {
	if l.Event == "" {
		return errors.New("no event")
	}
	if _, err := time.Parse(time.RFC3339Nano, l.Time); err != nil {
		return fmt.Errorf("time: %w", err)
	}
	return nil
}

// loadViews reads every watch-<node>.jsonl in dir (none is allowed: a
// run from before the harness watched).
func loadViews(dir string) ([]View, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "watch-*.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	var all []View
	for _, path := range paths {
		node := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "watch-"), ".jsonl")
		vs, err := ReadViews(path, node)
		if err != nil {
			return nil, err
		}
		all = append(all, vs...)
	}
	return all, nil
}

// Blip is a follower that lost its leader and found the same leader in
// the same term again: it said "no leader" (status, watch events; its
// leader-changed hooks run again when the leader comes back) while the
// term it followed went on. Its agent did not restart in between (a
// restarted agent knows no leader at first).
type Blip struct {
	At     int64         `json:"t"`      // the no-leader event, Unix nanoseconds
	Node   string        `json:"node"`   // the follower
	Leader string        `json:"leader"` // the leader it lost and found again
	Epoch  uint64        `json:"epoch"`  // the leader's term
	Gap    time.Duration `json:"gap_ns"` // from the no-leader event to the leader's return
	// Faulted says a fault was on at the no-leader event: a partition, a
	// kill, a wipe, a pause or a full disk after the last heal. With none
	// on, nothing the harness did explains the blip.
	Faulted bool `json:"faulted,omitempty"`
	// Why is the agent's reason on its no-leader event (the watch
	// event's forgot: "h4: it resigned"), empty from an agent that does
	// not say.
	Why string `json:"why,omitempty"`
	// AfterHeal is, for a blip with no fault on, how long before it the
	// last heal came (zero when none did): a follower's timers run on
	// after a heal, so one that forgets a leader it could not hear during
	// a cut may do it just after the heal (the agents' silence rule waits
	// three announce intervals and a question, 11 s with the LAN timing).
	AfterHeal time.Duration `json:"after_heal_ns,omitempty"`
}

// Blips finds every blip in views (sorted by T). events tells restarts
// (a start, kill or stop of the node after its report of the leader before
// the no-leader event, up to the leader's return) and faults apart. A
// no-leader event after the term's last interval in iv ended is no blip:
// the follower was right, and naming the term again after it (a
// COORDINATOR that a cut held for seconds) is a stale view (StaleViews).
// One TTL 1 s soak counted such a follower as a blip "with no fault on"
// (the term had ended in a ring 2.4 s before, the announcement came 3.35
// s late).
func Blips(views []View, iv []Interval, events []Event) []Blip {
	termEnd := termEnds(iv)
	type known struct {
		leader   string
		epoch    uint64
		reported int64 // when the node reported the leader
		lost     int64 // when it then said "no leader"
		why      string
	}
	cur := map[string]known{}  // each node's leader, from its last report of one
	lost := map[string]known{} // each node's leader when it said "no leader"
	var out []Blip
	for _, v := range views {
		switch {
		case v.Event == "no-leader":
			if k, ok := cur[v.Node]; ok && k.leader != v.Node {
				k.lost, k.why = v.T, v.Forgot
				lost[v.Node] = k
			}
			delete(cur, v.Node)
		case v.Leader != "":
			end, ended := termEnd[term{v.Leader, v.Epoch}]
			if l, ok := lost[v.Node]; ok && l.leader == v.Leader && l.epoch == v.Epoch &&
				!restarted(events, v.Node, l.reported, v.T) && !(ended && end <= l.lost) {
				b := Blip{At: l.lost, Node: v.Node, Leader: v.Leader, Epoch: v.Epoch,
					Gap: time.Duration(v.T - l.lost), Faulted: faultOn(events, l.lost), Why: l.why}
				if h, ok := lastHeal(events, l.lost); ok && !b.Faulted {
					b.AfterHeal = time.Duration(l.lost - h)
				}
				out = append(out, b)
			}
			delete(lost, v.Node)
			cur[v.Node] = known{leader: v.Leader, epoch: v.Epoch, reported: v.T}
		default: // lost-leadership, no successor known yet
			delete(cur, v.Node)
			delete(lost, v.Node)
		}
	}
	return out
}

// restarted reports whether node's agent was started, killed or stopped
// in (from, to].
func restarted(events []Event, node string, from, to int64) bool {
	return happened(events, from, to+1, func(e Event) bool {
		return (e.Kind == EventStart || e.Kind == EventKill || e.Kind == EventStop) && slices.Contains(e.Nodes, node)
	})
}

// happened reports whether an event that match accepts happened in
// (from, to), times in nanoseconds.
func happened(events []Event, from, to int64, match func(Event) bool) bool {
	for _, e := range events {
		if e.T > from && e.T < to && match(e) {
			return true
		}
	}
	return false
}

// faultOn reports whether a fault was on at t: a partition, kill, wipe,
// pause, pause-host or full disk after the last heal before t (as
// HandOvers counts them).
func faultOn(events []Event, t int64) bool {
	on := false
	for _, e := range events {
		if e.T > t {
			break
		}
		switch {
		case slices.Contains(faultKinds, e.Kind):
			on = true
		case e.Kind == EventHeal:
			on = false
		}
	}
	return on
}

// lastHeal is the time of the last heal at or before t.
func lastHeal(events []Event, t int64) (int64, bool) {
	var at int64
	found := false
	for _, e := range events {
		if e.T > t {
			break
		}
		if e.Kind == EventHeal {
			at, found = e.T, true
		}
	}
	return at, found
}

// String describes the blip for the report.
func (b Blip) String() string {
	s := fmt.Sprintf("%s lost %s (epoch %d) for %v", b.Node, b.Leader, b.Epoch, b.Gap.Round(time.Millisecond))
	switch {
	case b.Faulted:
		s += " (under a fault)"
	case b.AfterHeal > 0:
		s += fmt.Sprintf(", %v after a heal", b.AfterHeal.Round(time.Millisecond))
	}
	if b.Why != "" {
		s += fmt.Sprintf(": forgot %q", b.Why)
	}
	return s
}
