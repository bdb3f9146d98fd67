//go:build nemesis

package nemesis

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/tenurehq/tenure/test/nemesis/check"
)

// Events appends the harness's record of its faults to events.jsonl, one
// check.Event per line (the format belongs to the checker, which reads
// it). An event is recorded before the act it names takes effect (a kill
// before the signal, a resume before the first SIGCONT), except heal, which
// is recorded once every undo has completed. Safe for concurrent use.
type Events struct {
	mu sync.Mutex
	f  *os.File
}

// OpenEvents creates path for appending.
func OpenEvents(path string) (*Events, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("nemesis: events: %w", err)
	}
	return &Events{f: f}, nil
}

// Record appends one event stamped now and returns it.
func (e *Events) Record(kind string, nodes []string, detail string) (check.Event, error) {
	return e.write(check.Event{Kind: kind, Nodes: nodes, Detail: detail})
}

// RecordClockStep appends a check.EventClockStep stamped now: the wall
// clock moved step further than the monotonic clock since the harness
// last looked.
func (e *Events) RecordClockStep(step time.Duration, detail string) (check.Event, error) {
	return e.write(check.Event{Kind: check.EventClockStep, Step: int64(step), Detail: detail})
}

// write stamps ev now and appends it.
func (e *Events) write(ev check.Event) (check.Event, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ev.T = time.Now().UnixNano()
	line, err := json.Marshal(ev)
	if err != nil {
		return ev, fmt.Errorf("nemesis: events: %w", err)
	}
	if _, err := e.f.Write(append(line, '\n')); err != nil {
		return ev, fmt.Errorf("nemesis: events: %w", err)
	}
	return ev, nil
}

// Close closes the file.
func (e *Events) Close() error { return e.f.Close() }
