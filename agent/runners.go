package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// runnerSet holds the runners registered over the local socket
// (rpc.Backend.WatchRunner): `tenure run` supervisors, and any program that
// runs work only while this node leads. When a term ends, the driver waits
// for the runners that were told of it (stopWait). Its methods are safe for
// concurrent use: the driver, the socket's connections and stop barriers
// call them.
type runnerSet struct {
	mu      sync.Mutex
	all     map[*runnerConn]struct{}
	changed chan struct{} // closed and replaced when a runner reports or leaves
}

// runnerConn is one runner's registration: one watching connection. Its
// counters are guarded by runnerSet.mu.
type runnerConn struct {
	grace     time.Duration // how long its stop may take; fixed
	peer      rpc.Peer      // the process that registered; fixed
	told      uint64        // highest epoch its stream said this node leads
	confirmed uint64        // highest epoch it reported stopped
	pgid      int           // its work's process group (running frame); 0: none
	pgEpoch   uint64        // the term that group runs for
	left      bool          // the connection closed; kept until the group is gone
	stopping  bool          // the agent is stopping the group
}

func newRunnerSet() *runnerSet {
	return &runnerSet{all: map[*runnerConn]struct{}{}, changed: make(chan struct{})}
}

// add registers a runner.
func (s *runnerSet) add(grace time.Duration, peer rpc.Peer) *runnerConn {
	r := &runnerConn{grace: grace, peer: peer}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all[r] = struct{}{}
	return r
}

// remove forgets a runner that left: it owes nothing any more.
func (s *runnerSet) remove(r *runnerConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.all, r)
	s.signalLocked()
}

// told records that r's stream said this node leads epoch.
func (s *runnerSet) told(r *runnerConn, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.told = max(r.told, epoch)
}

// stopped records r's report that its work for epoch is not running. A
// runner runs one term's work at a time and terms only grow, so the report
// covers every earlier term too.
func (s *runnerSet) stopped(r *runnerConn, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if epoch >= r.pgEpoch {
		r.pgid = 0 // its group is not running: nothing to stop
	}
	if epoch > r.confirmed {
		r.confirmed = epoch
		s.signalLocked()
	}
}

func (s *runnerSet) signalLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// owing returns the runners that were told this node leads epoch and have
// not reported it stopped: the ones a release of epoch must wait for.
func (s *runnerSet) owing(epoch uint64) []*runnerConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*runnerConn
	for r := range s.all {
		if s.owesLocked(r, epoch) {
			out = append(out, r)
		}
	}
	return out
}

func (s *runnerSet) owesLocked(r *runnerConn, epoch uint64) bool {
	_, registered := s.all[r]
	return registered && r.told >= epoch && r.confirmed < epoch
}

// wait waits until none of rs owes epoch any more (each reported it
// stopped or left), or ctx ends.
func (s *runnerSet) wait(ctx context.Context, epoch uint64, rs []*runnerConn) error {
	for {
		s.mu.Lock()
		left, changed := 0, s.changed
		for _, r := range rs {
			if s.owesLocked(r, epoch) {
				left++
			}
		}
		s.mu.Unlock()
		if left == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("agent: %d runner(s) did not report term %d stopped: %w", left, epoch, ctx.Err())
		}
	}
}

// WatchRunner subscribes a runner to events, as Watch does, and registers
// it until cancel: a term this node leads that ends while its lease is
// valid is released only once every runner told of it has reported it
// stopped (or left, and its registered process group is gone), or at the
// lease deadline without a release. A grace longer than the lease TTL is
// refused (the command could never run).
func (b backend) WatchRunner(_ context.Context, reg rpc.RunnerRegistration) (rpc.RunnerSubscription, error) {
	a, grace := b.a, reg.Grace
	if a.cfg.Consistency == Quorum && grace > a.cfg.LeaseTTL {
		return rpc.RunnerSubscription{}, fmt.Errorf("agent: a runner's grace of %v exceeds the lease TTL of %v: its command could never run: %w",
			grace, a.cfg.LeaseTTL, rpc.ErrInvalidArgument)
	}
	r := a.runners.add(grace, reg.Peer)
	events, cancel := a.events.subscribeWith(b.currentLeader, func(ev rpc.Event) {
		if epoch, ok := a.namesSelfLeader(ev); ok {
			a.runners.told(r, epoch)
		}
	})
	a.log.Debug("runner registered", "grace", grace, "peer_pid", reg.Peer.PID)
	return rpc.RunnerSubscription{
		Events:  events,
		Stopped: func(epoch uint64) { a.counts.add("run.stopped"); a.runners.stopped(r, epoch) },
		Running: func(epoch uint64, pgid int) error {
			a.counts.add("run.started")
			return a.runners.running(r, epoch, pgid)
		},
		Cancel: func() {
			cancel()
			a.runnerLeft(r)
		},
	}, nil
}

// namesSelfLeader reports whether a leadership event says this node leads,
// and the term's epoch: what a runner starts its work on.
func (a *Agent) namesSelfLeader(ev rpc.Event) (uint64, bool) {
	l := ev.Leader
	if (ev.Event != rpc.EventLeaderChanged && ev.Event != rpc.EventBecameLeader) || l == nil {
		return 0, false
	}
	return l.Epoch, l.Node == a.cfg.Name && l.ID == a.cfg.ID
}
