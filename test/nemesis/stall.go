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

// clockStepThreshold is how far the wall clock must move beyond the
// monotonic clock between two looks to be recorded as a step
// (check.EventClockStep): far more than time synchronisation slews in
// 20 ms, and more than stallTick, which the checker's correction needs.
// The agents time their leases on the monotonic clock and every record
// stamps the wall clock: in one local soak the wall clock jumped 17 s
// ahead while no process stopped, and the checker, reading the stamps,
// saw a leader write 15.6 s after its lease and 15.9 s with no lease.
const clockStepThreshold = 100 * time.Millisecond

// clockReading is one look at the clock: the time, with its monotonic
// reading, and the wall clock in Unix nanoseconds.
type clockReading func() (time.Time, int64)

// readClock is the host's clock.
func readClock() (time.Time, int64) {
	t := time.Now()
	return t, t.UnixNano()
}

// stallWatch records the harness's stalls and the steps of the wall
// clock into the events until stop is closed; done is closed when it
// returns.
type stallWatch struct {
	stop, done chan struct{}
}

// watchStalls starts recording into events the stalls that the monotonic
// clock of now shows between the harness's looks, and the steps of its
// wall clock against the monotonic one.
func watchStalls(events *Events, log *slog.Logger, now clockReading) *stallWatch {
	w := &stallWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(stallTick)
		defer tick.Stop()
		last, lastWall := now()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			t, wall := now()
			gap := t.Sub(last)
			if gap > stallThreshold {
				detail := fmt.Sprintf("the harness ran nothing for %v", gap.Round(time.Millisecond))
				log.Warn("the host stalled: " + detail)
				if _, err := events.Record(check.EventStall, nil, detail); err != nil {
					log.Error("record a stall", "err", err)
				}
			}
			if step := time.Duration(wall-lastWall) - gap; step > clockStepThreshold || step < -clockStepThreshold {
				detail := fmt.Sprintf("the wall clock stepped %+v against the monotonic clock", step.Round(time.Millisecond))
				log.Warn("the host's clock stepped: " + detail)
				if _, err := events.RecordClockStep(step, detail); err != nil {
					log.Error("record a clock step", "err", err)
				}
			}
			last, lastWall = t, wall
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
