package hooks

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// worker runs one hook's queued events, one at a time, in order, on its
// own goroutine (loop).
type worker struct {
	r    *Runner
	hook Hook
	log  *slog.Logger
	wake chan struct{} // holds a token when queue or finished changed

	mu       sync.Mutex // guards the fields below
	queue    []Event
	finished bool          // no event will be queued any more
	queued   uint64        // events ever queued
	settled  uint64        // of those, the ones run or dropped
	progress chan struct{} // closed (and replaced) when settled grows
}

func newWorker(r *Runner, h Hook) *worker {
	return &worker{r: r, hook: h, log: r.log.With("hook", h.Name), wake: make(chan struct{}, 1),
		progress: make(chan struct{})}
}

// enqueue appends ev, dropping the oldest waiting event when the queue is
// full.
func (w *worker) enqueue(ev Event) {
	w.mu.Lock()
	var dropped *Event
	if len(w.queue) >= w.r.cfg.QueueLimit {
		old := w.queue[0]
		dropped = &old
		w.queue[0] = Event{}
		w.queue = w.queue[1:]
		w.settleLocked(1)
	}
	w.queue = append(w.queue, ev)
	w.queued++
	w.mu.Unlock()
	w.signal()
	if dropped != nil {
		w.log.Warn("hooks: queue full; dropped the oldest waiting event",
			"event", dropped.Event, "epoch", dropped.Epoch, "queue_limit", w.r.cfg.QueueLimit)
	}
}

// finish tells the worker that no more events come: it returns once its
// queue is empty.
func (w *worker) finish() {
	w.mu.Lock()
	w.finished = true
	w.mu.Unlock()
	w.signal()
}

func (w *worker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// loop runs queued events until finish is called and the queue is empty,
// or until the Runner aborts.
func (w *worker) loop() {
	defer w.r.running.Done()
	for {
		ev, ok := w.next()
		if !ok {
			return
		}
		w.run(ev)
		w.mu.Lock()
		w.settleLocked(1)
		w.mu.Unlock()
	}
}

// next waits for the next event; false means the worker is done.
func (w *worker) next() (Event, bool) {
	for {
		select {
		case <-w.r.abort:
			w.dropQueue()
			return Event{}, false
		default:
		}
		w.mu.Lock()
		if len(w.queue) > 0 {
			ev := w.queue[0]
			w.queue[0] = Event{}
			w.queue = w.queue[1:]
			w.mu.Unlock()
			return ev, true
		}
		finished := w.finished
		w.mu.Unlock()
		if finished {
			return Event{}, false
		}
		select {
		case <-w.wake:
		case <-w.r.abort:
		}
	}
}

// dropQueue empties the queue, logging what it drops.
func (w *worker) dropQueue() {
	w.mu.Lock()
	q := w.queue
	w.queue = nil
	w.settleLocked(uint64(len(q)))
	w.mu.Unlock()
	for _, ev := range q {
		w.log.Warn("hooks: closing; queued event not run", "event", ev.Event, "epoch", ev.Epoch)
	}
}

// settleLocked counts n more events run or dropped and wakes the waiters
// of waitSettled. w.mu must be held.
func (w *worker) settleLocked(n uint64) {
	if n == 0 {
		return
	}
	w.settled += n
	close(w.progress)
	w.progress = make(chan struct{})
}

// pending returns how many events have been queued so far, and whether
// some of them have not been run or dropped yet.
func (w *worker) pending() (queued uint64, waiting bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.queued, w.settled < w.queued
}

// waitSettled waits until the first n events queued have been run or
// dropped, or ctx ends.
func (w *worker) waitSettled(ctx context.Context, n uint64) error {
	for {
		w.mu.Lock()
		done, progress := w.settled >= n, w.progress
		w.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-progress:
		case <-ctx.Done():
			return fmt.Errorf("hooks: waiting for %s's runs: %w", w.hook.Name, ctx.Err())
		}
	}
}
