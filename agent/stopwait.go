package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// A term this node leads that ends while its lease is valid (resign,
// preemption, graceful shutdown) is let go in this order:
//
//  1. the core leaves the leader state; the driver publishes it (status,
//     lost-leadership to watchers and hooks);
//  2. the driver waits, off its goroutine, until every runner told of the
//     term has reported it stopped or left, and the leadership hook runs
//     queued so far are done (a stopWait);
//  3. the core releases the lease (core.stopped) and the term's RESIGN,
//     which the core held back meanwhile, goes out with it, so the next
//     leader starts at once, on voters that no longer promise this node.
//
// Step 2 is bounded by the lease deadline: work that has not confirmed by
// then gets no release at all (the voters' promises run out by themselves),
// and the core sends the RESIGN alone. With nothing to wait for, step 3
// follows in the same flush.

// stopWait is step 2 for one term. Only the driver touches its fields,
// except done and sent, which a waiter reads once done is closed.
type stopWait struct {
	epoch    uint64
	deadline time.Time // the lease deadline last published for the term
	started  time.Time
	finished bool // the wait is over: released, or given up
	cancel   context.CancelFunc
	done     chan struct{}   // closed when finished or dropped
	sent     *sync.WaitGroup // what went out when it finished; nil if dropped
}

// leaderHookEvents are the hook events whose runs a release waits for.
var leaderHookEvents = []string{rpc.EventBecameLeader, rpc.EventLostLeadership}

// settleStop runs step 2 for the term whose release the core holds, if
// any, after the status has been published: it releases at once when no
// local work is told of the term, and otherwise starts a stopWait. It ends
// a stopWait the core no longer holds a release for.
func (a *Agent) settleStop(now, deadline time.Time) {
	epoch, pending := a.core.stopPending()
	if w := a.stopping; w != nil && (!pending || w.epoch != epoch) {
		a.dropStop(w)
	}
	if pending && a.stopping == nil {
		a.startStop(now, deadline, epoch)
	}
}

// startStop releases epoch at once when nothing local was told of it, and
// otherwise starts waiting for what was.
func (a *Agent) startStop(now, deadline time.Time, epoch uint64) {
	runners := a.runners.owing(epoch)
	hooks := a.hookRunner().Barrier(leaderHookEvents...)
	if len(runners) == 0 && hooks == nil {
		a.core.stopped(now, epoch)
		return
	}
	ctx, cancel := context.WithTimeout(a.ctx, deadline.Sub(now))
	w := &stopWait{epoch: epoch, deadline: deadline, started: now, cancel: cancel, done: make(chan struct{})}
	a.stopping = w
	a.log.Info("waiting for local work of the ended term to stop before releasing its lease",
		"epoch", epoch, "runners", len(runners), "hooks", hooks != nil, "lease_left", deadline.Sub(now))
	a.warnLongGrace(runners, deadline.Sub(now))
	a.enforceStop(epoch, runners)
	a.stops.Add(1)
	go a.awaitStop(ctx, w, runners, hooks)
}

// warnLongGrace warns when a runner's stop may outlast the lease left.
func (a *Agent) warnLongGrace(runners []*runnerConn, left time.Duration) {
	for _, r := range runners {
		if r.grace >= left {
			a.log.Warn("a runner's grace is longer than the lease left: if its stop takes that long, the lease is not released and the next leader waits for the voters' promises to run out",
				"grace", r.grace, "lease_left", left)
			return
		}
	}
}

// awaitStop waits for the runners and hooks of w's term, bounded by ctx
// (the lease deadline), and hands the outcome to the driver.
func (a *Agent) awaitStop(ctx context.Context, w *stopWait, runners []*runnerConn, hooks func(context.Context) error) {
	defer a.stops.Done()
	err := a.runners.wait(ctx, w.epoch, runners)
	if err == nil && hooks != nil {
		err = hooks(ctx)
	}
	_ = a.do(a.ctx, func() { a.finishStop(w, err) })
}

// finishStop ends w's wait on the driver: the release (and the RESIGN the
// core held) goes out if the local work stopped before the lease deadline;
// otherwise the core sends the RESIGN alone at the deadline.
func (a *Agent) finishStop(w *stopWait, err error) {
	if a.stopping != w || w.finished {
		return
	}
	w.finished = true
	w.cancel()
	now := a.cfg.Clock.Now()
	if err == nil && now.Before(w.deadline) {
		a.log.Info("local work of the ended term stopped; releasing its lease", "epoch", w.epoch, "waited", now.Sub(w.started))
		a.core.stopped(now, w.epoch)
	} else {
		a.warnNoRelease(w, now, err)
	}
	w.sent = a.flush()
	close(w.done)
}

func (a *Agent) warnNoRelease(w *stopWait, now time.Time, err error) {
	a.log.Warn("local work of the ended term did not report stopped before the lease deadline: not releasing the lease; the next leader waits for the voters' promises to run out",
		"epoch", w.epoch, "waited", now.Sub(w.started), "err", err)
}

// dropStop forgets w: its release went out, or the core gave it up (the
// lease deadline passed, or a later term ended) while w still waited.
func (a *Agent) dropStop(w *stopWait) {
	a.stopping = nil
	w.cancel()
	if !w.finished {
		w.finished = true
		a.warnNoRelease(w, a.cfg.Clock.Now(), errors.New("agent: the core gave the release up"))
		close(w.done)
	}
}

// waitStop waits, bounded by ctx, until w has finished and what it sent
// then is delivered or failed. It reports whether that happened in time;
// false too when w was dropped unfinished (the core gave the release up).
func waitStop(ctx context.Context, w *stopWait) bool {
	select {
	case <-w.done:
	case <-ctx.Done():
		return false
	}
	return w.sent != nil && waitSent(ctx, w.sent)
}

// waitSent waits, bounded by ctx, until sent is done.
func waitSent(ctx context.Context, sent *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() { sent.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
