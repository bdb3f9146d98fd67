package hooks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/tenurehq/tenure/internal/procgroup"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Defaults for the Config fields left zero.
const (
	// DefaultTimeout bounds one run.
	DefaultTimeout = 30 * time.Second
	// DefaultKillGrace is how long a timed-out run's process group has
	// between SIGTERM and SIGKILL.
	DefaultKillGrace = 5 * time.Second
	// DefaultQueueLimit is how many events may wait per hook.
	DefaultQueueLimit = 1024
)

// Config configures a Runner. NewRunner copies it and never writes back.
type Config struct {
	// Hooks are the hooks to run. They are checked by NewRunner.
	Hooks []Hook
	// Timeout bounds each run; default DefaultTimeout.
	Timeout time.Duration
	// KillGrace is the time between SIGTERM and SIGKILL to a timed-out
	// run's process group; default DefaultKillGrace.
	KillGrace time.Duration
	// Logger receives the runs' output and outcomes; default: discard.
	Logger *slog.Logger
	// Env is the base environment of every run; default os.Environ() when
	// NewRunner is called.
	Env []string
	// Observe, if set, is told the outcome of every run (for metrics). It
	// is called from the hooks' own goroutines, concurrently for different
	// hooks, after the run has ended; it must not block.
	Observe func(RunOutcome)
	// QueueLimit is how many events may wait per hook; when one more
	// arrives the oldest waiting event is dropped and logged. Default
	// DefaultQueueLimit.
	QueueLimit int
}

// withDefaults returns a copy of c with defaults filled in and hooks named,
// or the first problem with c.
func (c Config) withDefaults() (Config, error) {
	if !procgroup.Supported && len(c.Hooks) > 0 {
		return c, errors.New("hooks: hooks need a Unix system (process groups and /bin/sh)")
	}
	if c.Timeout < 0 || c.KillGrace < 0 || c.QueueLimit < 0 {
		return c, errors.New("hooks: config: negative Timeout, KillGrace or QueueLimit")
	}
	hooks, err := nameHooks(c.Hooks)
	if err != nil {
		return c, err
	}
	c.Hooks = hooks
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.KillGrace = cmp.Or(c.KillGrace, DefaultKillGrace)
	c.QueueLimit = cmp.Or(c.QueueLimit, DefaultQueueLimit)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Env == nil {
		c.Env = os.Environ()
	}
	c.Env = slices.Clone(c.Env)
	return c, nil
}

// nameHooks checks hs and returns a copy in which every hook has a name of
// its own.
func nameHooks(hs []Hook) ([]Hook, error) {
	out := make([]Hook, len(hs))
	seen := make(map[string]int, len(hs))
	for i, h := range hs {
		if err := h.validate(); err != nil {
			return nil, fmt.Errorf("%w (hook %d)", err, i+1)
		}
		h.Events = slices.Clone(h.Events)
		if h.Name == "" {
			h.Name = "hook-" + strconv.Itoa(i+1)
		}
		seen[h.Name]++
		if n := seen[h.Name]; n > 1 {
			h.Name += "#" + strconv.Itoa(n)
		}
		out[i] = h
	}
	return out, nil
}

// Runner runs hooks for the events dispatched to it. Its methods are safe
// for concurrent use.
type Runner struct {
	cfg     Config
	log     *slog.Logger
	workers []*worker

	running   sync.WaitGroup // the workers' goroutines
	abort     chan struct{}  // closed when Close gives up waiting
	abortOnce sync.Once

	outputs     sync.WaitGroup // goroutines reading the runs' output
	outputCtx   context.Context
	stopOutputs context.CancelFunc // makes the output readers stop

	mu     sync.Mutex // guards closed, and orders Dispatch before Close
	closed bool
}

// NewRunner checks cfg and starts one goroutine per hook. Errors about a
// hook wrap ErrBadHook.
func NewRunner(cfg Config) (*Runner, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, log: cfg.Logger, abort: make(chan struct{})}
	r.outputCtx, r.stopOutputs = context.WithCancel(context.Background())
	for _, h := range cfg.Hooks {
		w := newWorker(r, h)
		r.workers = append(r.workers, w)
		r.running.Add(1)
		go w.loop()
	}
	return r, nil
}

// Dispatch queues ev for every hook that wants it and returns at once; it
// never blocks on a run. Each hook runs its events one at a time in the
// order Dispatch was called, so callers that must keep an order (the
// agent's leadership events) dispatch from one goroutine. Events whose name
// is not one of EventNames, and events dispatched after Close, run nothing
// (they are logged at Debug and Warn).
func (r *Runner) Dispatch(ev Event) {
	if !knownEvent(ev.Event) {
		r.log.Debug("hooks: no hook runs for this event", "event", ev.Event)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		r.log.Warn("hooks: event after close; not run", "event", ev.Event, "epoch", ev.Epoch)
		return
	}
	for _, w := range r.workers {
		if w.hook.wants(ev.Event) {
			w.enqueue(ev)
		}
	}
}

// Barrier returns a function that waits until every run queued so far for
// the hooks that want any of events has finished (or was dropped, or cut
// short by Close), or until its ctx ends (then it returns an error wrapping
// ctx's error). Runs queued after Barrier returns are not waited for. It
// returns nil when there is nothing to wait for. The agent uses it to let
// the hook runs of an ended term finish before it releases the lease.
func (r *Runner) Barrier(events ...string) func(ctx context.Context) error {
	type mark struct {
		w *worker
		n uint64
	}
	var marks []mark
	for _, w := range r.workers {
		if !slices.ContainsFunc(events, w.hook.wants) {
			continue
		}
		if n, waiting := w.pending(); waiting {
			marks = append(marks, mark{w, n})
		}
	}
	if len(marks) == 0 {
		return nil
	}
	return func(ctx context.Context) error {
		for _, m := range marks {
			if err := m.w.waitSettled(ctx, m.n); err != nil {
				return err
			}
		}
		return nil
	}
}

// Close stops accepting events and lets every queued run happen until ctx
// ends. Then it drops the events still queued, SIGKILLs the process group
// of every run still going, and returns an error wrapping ctx's error. It
// also stops reading the output of processes runs left in the background.
// Close returns only when all of the Runner's goroutines have; calling it
// again waits the same way.
func (r *Runner) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	for _, w := range r.workers {
		w.finish()
	}
	err := r.waitRuns(ctx)
	r.stopOutputs()
	r.outputs.Wait()
	return err
}

// waitRuns waits for the workers to finish, or aborts them when ctx ends.
func (r *Runner) waitRuns(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		r.running.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	r.abortOnce.Do(func() { close(r.abort) })
	<-done
	return fmt.Errorf("hooks: close: runs cut short: %w", ctx.Err())
}
