package agent

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// Journal event names: the lines Config.Journal receives.
const (
	// JournalStart: the agent started (epoch and until are 0).
	JournalStart = "start"
	// JournalLead: this node became leader of term epoch, its lease valid
	// until until.
	JournalLead = "lead"
	// JournalExtend: the lease of term epoch was renewed until until.
	JournalExtend = "extend"
	// JournalEnd: this node stopped leading term epoch (resign, step-down,
	// a lease that ran out, or the agent stopping).
	JournalEnd = "end"
)

// JournalEntry is one line of the leadership journal: times are Unix
// nanoseconds of the wall clock, so the journals of agents on one machine
// can be compared exactly. Until is 0 in available mode, which has no
// lease.
type JournalEntry struct {
	T     int64  `json:"t"`
	Node  string `json:"node"`
	Event string `json:"event"`
	Epoch uint64 `json:"epoch"`
	Until int64  `json:"until"`
}

// journal appends this node's own leadership transitions to a file, for
// audits and for the fault-injection harness, which checks from the
// journals of all agents that no two leases ever overlapped. Each line is
// written with one write(2) to a file opened O_APPEND, before the status
// that the transition changes is published: a lease is journaled before
// anyone can see it. Used by the driver goroutine only.
type journal struct {
	f    *os.File
	node string
	log  *slog.Logger
	// clock is the agent's clock; deadlines read on it are turned into
	// wall-clock times by their distance from its now.
	clock Clock
	term  uint64    // the term this node leads per the journal, or 0
	until time.Time // its lease deadline on clock
}

// openJournal opens path for appending and records the start; an empty
// path journals nothing (nil).
func openJournal(path, node string, clock Clock, log *slog.Logger) (*journal, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("agent: journal: %w", err)
	}
	j := &journal{f: f, node: node, log: log, clock: clock}
	j.write(JournalStart, 0, time.Time{})
	return j, nil
}

// observe records the transitions from the snapshot old to now.
func (j *journal) observe(old, now snapshot) {
	if j == nil {
		return
	}
	leading, term := now.state == "leader", now.status.Term
	if j.term != 0 && (!leading || term != j.term) {
		j.write(JournalEnd, j.term, time.Time{})
		j.term = 0
	}
	switch {
	case !leading:
	case j.term == 0:
		j.term, j.until = term, now.deadline
		j.write(JournalLead, term, now.deadline)
	case !now.deadline.Equal(j.until):
		j.until = now.deadline
		j.write(JournalExtend, term, now.deadline)
	}
}

// close ends a term still open (the agent stops leading when it stops) and
// closes the file.
func (j *journal) close() {
	if j == nil {
		return
	}
	if j.term != 0 {
		j.write(JournalEnd, j.term, time.Time{})
	}
	if err := j.f.Close(); err != nil {
		j.log.Error("journal: close", "err", err)
	}
}

// write appends one line; a failure is logged, not fatal: the journal
// observes leadership, it does not decide it.
func (j *journal) write(event string, epoch uint64, deadline time.Time) {
	wall := time.Now()
	e := JournalEntry{T: wall.UnixNano(), Node: j.node, Event: event, Epoch: epoch}
	if !deadline.IsZero() {
		e.Until = wall.Add(deadline.Sub(j.clock.Now())).UnixNano()
	}
	line, err := json.Marshal(e)
	if err == nil {
		_, err = j.f.Write(append(line, '\n'))
	}
	if err != nil {
		j.log.Error("journal: write", "event", event, "epoch", epoch, "err", err)
	}
}
