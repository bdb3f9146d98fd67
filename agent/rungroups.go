package agent

import (
	"fmt"
	"time"

	"github.com/tenurehq/tenure/internal/procgroup"
)

// A runner may register the process group its work runs in (a running
// frame, docs/PROTOCOL.md section 6.8), so that the work stops even when
// the runner cannot stop it: the agent stops the group itself (SIGTERM,
// SIGKILL after the runner's grace) when
//
//   - the runner's connection closes while the group is registered and not
//     reported stopped (`tenure run` was SIGKILLed: its direct child died
//     of its parent-death signal, its grandchildren did not), or
//   - a term ends and the runner has not reported it stopped within its
//     grace (plus enforceMargin).
//
// A runner that left with a group registered counts as stopped for the
// release barrier only once the group is gone. The agent registers only a
// group it can attribute to the runner's process (procgroup.Attribute:
// the group's leader is the runner's child, with its uid); it never
// signals another.

// enforceMargin is added to a runner's grace before the agent stops the
// group of a term that ended: the runner's own SIGKILL lands at its grace.
const enforceMargin = 500 * time.Millisecond

// running registers r's process group for epoch, if it can be attributed
// to r's process.
func (s *runnerSet) running(r *runnerConn, epoch uint64, pgid int) error {
	if !r.peer.Known {
		return fmt.Errorf("agent: the runner's process is unknown (no SO_PEERCRED): cannot attribute group %d to it", pgid)
	}
	if err := procgroup.Attribute(pgid, r.peer.PID, r.peer.UID); err != nil {
		return fmt.Errorf("agent: runner (pid %d): %w", r.peer.PID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if epoch > r.confirmed || r.confirmed == 0 {
		r.pgid, r.pgEpoch = pgid, epoch
	}
	return nil
}

// leave forgets a runner whose connection closed, unless it left a
// registered group: then it stays, marked left, and leave returns the
// group for the caller to stop.
func (s *runnerSet) leave(r *runnerConn) (pgid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.pgid == 0 {
		delete(s.all, r)
		s.signalLocked()
		return 0
	}
	r.left = true
	if r.stopping {
		return 0 // the term's enforcement stops it, then forgets r
	}
	r.stopping = true
	return r.pgid
}

// groupGone records that the agent stopped r's group for epoch: r no
// longer owes epoch, and a runner that left is forgotten.
func (s *runnerSet) groupGone(r *runnerConn, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.pgid, r.stopping = 0, false
	r.confirmed = max(r.confirmed, epoch)
	if r.left {
		delete(s.all, r)
	}
	s.signalLocked()
}

// overdue reports whether r still has a group of epoch or earlier running
// unreported, and claims it for stopping.
func (s *runnerSet) overdue(r *runnerConn, epoch uint64) (pgid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.pgid == 0 || r.pgEpoch > epoch || r.confirmed >= epoch || r.stopping {
		return 0
	}
	r.stopping = true
	return r.pgid
}

// runnerLeft handles a runner's closed connection: a registered group
// still running is stopped before the runner counts as stopped.
func (a *Agent) runnerLeft(r *runnerConn) {
	pgid := a.runners.leave(r)
	if pgid == 0 {
		a.log.Debug("runner left", "grace", r.grace)
		return
	}
	a.log.Warn("a runner left with its work's process group registered and not reported stopped: stopping the group",
		"pgid", pgid, "grace", r.grace, "peer_pid", r.peer.PID)
	a.stops.Add(1)
	go func() {
		defer a.stops.Done()
		a.stopGroup(r, pgid, 0)
	}()
}

// stopGroup stops r's group pgid (SIGTERM, SIGKILL after r's grace, at
// once if the agent stops meanwhile), then records it gone, as stopped
// for every term up to epoch (0 for a runner that left).
func (a *Agent) stopGroup(r *runnerConn, pgid int, epoch uint64) {
	killed := procgroup.Stop(pgid, r.grace, a.ctx.Done())
	if procgroup.Running(pgid) {
		a.log.Warn("a runner's process group survived SIGKILL (uninterruptible sleep?)", "pgid", pgid)
	}
	a.log.Info("stopped a runner's process group", "pgid", pgid, "killed", killed)
	a.runners.groupGone(r, epoch)
}

// enforceStop waits, for each runner of rs with a group registered for
// epoch, its grace plus enforceMargin for the runner's stopped report,
// and stops the group itself if none came.
func (a *Agent) enforceStop(epoch uint64, rs []*runnerConn) {
	for _, r := range rs {
		a.stops.Add(1)
		go func() {
			defer a.stops.Done()
			t := time.NewTimer(r.grace + enforceMargin)
			defer t.Stop()
			select {
			case <-t.C:
			case <-a.ctx.Done():
				return
			}
			if pgid := a.runners.overdue(r, epoch); pgid != 0 {
				a.log.Warn("a runner did not report the ended term stopped within its grace: stopping its process group",
					"epoch", epoch, "pgid", pgid, "grace", r.grace)
				a.stopGroup(r, pgid, epoch)
			}
		}()
	}
}

// hasGroup reports whether a runner has group pgid registered.
func (s *runnerSet) hasGroup(pgid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for r := range s.all {
		if r.pgid == pgid {
			return true
		}
	}
	return false
}
