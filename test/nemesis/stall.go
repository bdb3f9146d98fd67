//go:build nemesis

package nemesis

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/tenurehq/tenure/test/nemesis/check"
)

// stallThreshold is the gap in the harness's own ticks that it records as
// a stall of the host (check.EventStall): far longer than a running
// host's scheduling delays, shorter than the leases the runs use. In a
// stall every process stops at once (the agents, their commands and
// the harness), and whichever runs first after it acts on what it knew
// before: a command can write once more with a lease that ran out during
// the stall, before its agent has seen the end and stopped it. A stall
// is reported, not excused: the checks judge the run as they find it,
// and the report says what the host did.
const stallThreshold = 500 * time.Millisecond

// stallTick is how often the harness looks at the clock for stalls.
const stallTick = 20 * time.Millisecond

// stallWatch records the harness's stalls into the events until stop is
// closed; done is closed when it returns.
type stallWatch struct {
	stop, done chan struct{}
}

// watchStalls starts recording into events the stalls that now, the
// clock, shows between the harness's ticks.
func watchStalls(events *Events, log *slog.Logger, now func() time.Time) *stallWatch {
	w := &stallWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(stallTick)
		defer tick.Stop()
		last := now()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			t := now()
			if gap := t.Sub(last); gap > stallThreshold {
				detail := fmt.Sprintf("the harness ran nothing for %v", gap.Round(time.Millisecond))
				log.Warn("the host stalled: " + detail)
				if _, err := events.Record(check.EventStall, nil, detail); err != nil {
					log.Error("record a stall", "err", err)
				}
			}
			last = t
		}
	}()
	return w
}

// end stops the watch and waits for it.
func (w *stallWatch) end() {
	if w == nil {
		return
	}
	close(w.stop)
	<-w.done
}
