package hooks

import (
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
	finished bool // no event will be queued any more
}

func newWorker(r *Runner, h Hook) *worker {
	return &worker{r: r, hook: h, log: r.log.With("hook", h.Name), wake: make(chan struct{}, 1)}
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
	}
	w.queue = append(w.queue, ev)
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
	w.mu.Unlock()
	for _, ev := range q {
		w.log.Warn("hooks: closing; queued event not run", "event", ev.Event, "epoch", ev.Epoch)
	}
}
