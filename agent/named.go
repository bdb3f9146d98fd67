package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/leasing/named"
	"github.com/tenurehq/tenure/rpc"
)

// lockSession is one socket client's claim on a named lease (rpc.OpLock).
// Its fields are the driver goroutine's, except the events channel and
// the once-guarded end.
type lockSession struct {
	id        uint64
	name      string
	ttl       time.Duration
	events    chan rpc.LockEvent
	waitUntil time.Time // zero: wait as long as it takes
	lastRenew time.Time // the client's last lock-renew (or the grant)
	held      bool
	task      bool // a singleton task: its acquisition and loss are events
	token     uint64
	once      sync.Once
	end       error
}

// lockEventBuffer is how many events a session holds for a slow client;
// one that falls further behind loses its lease (it would not see the
// loss in time).
const lockEventBuffer = 32

// tryOnceBudget bounds how long a try-once lock request waits for the
// leader's answer.
const tryOnceBudget = 5 * time.Second

// Lock starts a lock session: the local claim on a named lease, renewed
// with the leader while the client renews with this agent at least once
// per TTL (rpc.LockSession).
func (a *Agent) Lock(ctx context.Context, req rpc.LockRequest) (rpc.LockSession, error) {
	ttl := time.Duration(req.TTLMS) * time.Millisecond
	if req.TTLMS == 0 {
		ttl = DefaultNamedTTL(a.cfg.LeaseTTL)
	}
	policy := named.FIFO
	switch {
	case req.Group != "":
		policy = named.Share
		if !strings.HasPrefix(req.Name, req.Group+"/") {
			return rpc.LockSession{}, fmt.Errorf("%w: lock: a partition of group %q must be named %s/N, not %q", rpc.ErrInvalidArgument, req.Group, req.Group, req.Name)
		}
	case req.Task:
		policy = named.Spread
	}
	s := &lockSession{name: req.Name, ttl: ttl, task: req.Task && req.Group == "", events: make(chan rpc.LockEvent, lockEventBuffer)}
	var err error
	derr := a.do(ctx, func() {
		now := a.cfg.Clock.Now()
		a.lastSession++
		s.id, s.lastRenew = a.lastSession, now
		switch {
		case req.WaitMS == 0:
			s.waitUntil = now.Add(tryOnceBudget)
		case req.WaitMS > 0:
			s.waitUntil = now.Add(time.Duration(req.WaitMS) * time.Millisecond)
		}
		if err = a.core.namedWant(now, req.Name, s.id, ttl, req.WaitMS != 0, policy, req.Group); err != nil {
			return
		}
		a.sessions[s.id] = s
		a.flush()
	})
	if derr != nil {
		return rpc.LockSession{}, derr
	}
	if err != nil {
		return rpc.LockSession{}, fmt.Errorf("%w: lock %q: %v", rpc.ErrInvalidArgument, req.Name, err)
	}
	return rpc.LockSession{
		Events:  s.events,
		End:     func() error { return s.end },
		Renew:   func() { a.post(func() { a.renewSession(s) }) },
		Release: func() { a.post(func() { a.releaseSession(s) }) },
		Close:   func() { a.post(func() { a.endSession(s, errSessionClosed) }) },
	}, nil
}

// post runs f on the driver goroutine without waiting; it is dropped when
// the agent stops (stop ends every session).
func (a *Agent) post(f func()) {
	go func() { _ = a.do(a.ctx, func() { f(); a.flush() }) }()
}

// renewSession records a client's keep-alive and tells it how long its
// lease runs.
func (a *Agent) renewSession(s *lockSession) {
	if a.sessions[s.id] != s {
		return
	}
	now := a.cfg.Clock.Now()
	s.lastRenew = now
	if tok, dl, ok := a.core.named.claims.Valid(now, s.name, s.id); ok {
		a.sessionEvent(s, rpc.LockEvent{State: rpc.LockRenewed, Token: tok, RemainingMS: dl.Sub(now).Milliseconds()})
	}
}

// errSessionClosed ends a session whose connection closed.
var errSessionClosed = errors.New("agent: the lock session's connection closed")

// releaseSession ends a session at its client's request: a held lease is
// released at the leader at once, so the next waiter need not wait.
func (a *Agent) releaseSession(s *lockSession) {
	if a.sessions[s.id] != s {
		return
	}
	a.core.namedDrop(a.cfg.Clock.Now(), s.name, s.id)
	a.closeSession(s, nil)
}

// endSession ends a session for any other reason than its client's
// release (a loss, a closed connection, a client that stopped renewing,
// the agent stopping): a waiting claim leaves the queue, but a held lease
// is not released, only left to run out at the leader, since the client's
// work may still be stopping (the same rule as for a term's release,
// docs/DESIGN.md §4).
func (a *Agent) endSession(s *lockSession, err error) {
	if a.sessions[s.id] != s {
		return
	}
	a.core.namedAbandon(a.cfg.Clock.Now(), s.name, s.id)
	a.closeSession(s, err)
}

// closeSession forgets s and closes its events with err as the end.
func (a *Agent) closeSession(s *lockSession, err error) {
	delete(a.sessions, s.id)
	if s.held {
		a.taskEvent(s, rpc.EventTaskLost)
	}
	s.once.Do(func() {
		s.end = err
		close(s.events)
	})
}

// taskEvent tells watchers and hooks that a task session acquired or
// lost its task.
func (a *Agent) taskEvent(s *lockSession, event string) {
	if !s.task {
		return
	}
	a.publish(rpc.Event{Time: formatTime(a.cfg.Clock.Now()), Event: event, Node: a.cfg.Name, Task: s.name, Token: s.token})
}

// sessionEvent sends ev to s's client; a client too slow to read loses
// its session.
func (a *Agent) sessionEvent(s *lockSession, ev rpc.LockEvent) {
	ev.Name, ev.TTLMS = s.name, s.ttl.Milliseconds()
	select {
	case s.events <- ev:
	default:
		a.endSession(s, fmt.Errorf("%w: %q: the client did not read its lock events", rpc.ErrLost, s.name))
	}
}

// dispatchNamed hands what happened to the local claims to their
// sessions. It runs on the driver goroutine after every core step.
func (a *Agent) dispatchNamed(now time.Time) {
	for _, ev := range a.core.takeNamedEvents() {
		s := a.sessions[ev.Session]
		if s == nil {
			continue
		}
		switch ev.Kind {
		case named.Acquired, named.Renewed:
			s.held = true
			state := rpc.LockRenewed
			if ev.Kind == named.Acquired {
				state, s.lastRenew, s.token = rpc.LockAcquired, now, ev.Token
				a.counts.add("named.acquired")
				a.taskEvent(s, rpc.EventTaskAcquired)
			}
			a.sessionEvent(s, rpc.LockEvent{State: state, Token: ev.Token, RemainingMS: ev.Deadline.Sub(now).Milliseconds()})
		case named.Revoked:
			a.sessionEvent(s, rpc.LockEvent{State: rpc.LockRevoked, Token: ev.Token, RemainingMS: ev.Deadline.Sub(now).Milliseconds()})
		case named.Queued:
			a.sessionEvent(s, rpc.LockEvent{State: rpc.LockQueued, Position: int64(ev.Position)})
		case named.Lost:
			a.counts.add("named.lost")
			a.endSession(s, fmt.Errorf("%w: %q: %s", rpc.ErrLost, s.name, ev.Message))
		case named.Refused:
			err := fmt.Errorf("%w: %q: %s", rpc.ErrInvalidArgument, s.name, ev.Message)
			if ev.Code == named.CodeBusy {
				err = fmt.Errorf("%w: %q is %s", rpc.ErrTimeout, s.name, ev.Message)
			}
			a.endSession(s, err)
		}
	}
	a.checkSessions(now)
}

// checkSessions ends sessions whose wait ran out and those whose client
// stopped renewing for a whole TTL.
func (a *Agent) checkSessions(now time.Time) {
	for _, s := range a.sessions {
		switch {
		case !s.held && !s.waitUntil.IsZero() && !now.Before(s.waitUntil):
			a.endSession(s, a.waitError(s))
		case s.held && !now.Before(s.lastRenew.Add(s.ttl)):
			a.endSession(s, fmt.Errorf("%w: %q: the client did not renew within the TTL %v; released", rpc.ErrLost, s.name, s.ttl))
		}
	}
}

// waitError says why a session's wait ended without the lease.
func (a *Agent) waitError(s *lockSession) error {
	if leader, _ := a.core.named.claims.Leader(); leader.Name == "" {
		return fmt.Errorf("%w: %q: no leader answered (no quorum?)", rpc.ErrNoLeader, s.name)
	}
	return fmt.Errorf("%w: %q was not granted within the wait", rpc.ErrTimeout, s.name)
}

// endAllSessions ends every session as the agent stops.
func (a *Agent) endAllSessions() {
	for _, s := range a.sessions {
		a.endSession(s, fmt.Errorf("%w: the agent is stopping", rpc.ErrShuttingDown))
	}
}

// Locks lists the leader's named leases: this node's table when it leads,
// else the leader's, asked over the peer transport.
func (a *Agent) Locks(ctx context.Context) ([]rpc.LockInfo, error) {
	var infos []named.Info
	var leader = a.self()
	var err error
	if derr := a.do(ctx, func() {
		infos, leader, err = a.core.namedList(a.cfg.Clock.Now())
	}); derr != nil {
		return nil, derr
	}
	switch {
	case errors.Is(err, errNamedAvailable):
		return nil, fmt.Errorf("%w: %v", rpc.ErrInvalidArgument, err)
	case err != nil && leader.IsZero():
		return nil, fmt.Errorf("%w: no leader is known", rpc.ErrNoLeader)
	case err != nil:
		var rep *namedListReply
		err := a.askLeader(ctx, leader, "locks", envelope{NamedList: true}, func(env envelope) *leaderReply {
			rep = env.NamedListReply
			if rep == nil {
				return nil
			}
			return &rep.leaderReply
		})
		if err != nil {
			return nil, err
		}
		infos = rep.Names
	}
	out := make([]rpc.LockInfo, 0, len(infos))
	for _, in := range infos {
		li := rpc.LockInfo{Name: in.Name, Kind: "lock", Waiters: []string{}}
		switch in.Policy {
		case named.Spread:
			li.Kind = "task"
		case named.Share:
			li.Kind, li.Group, li.Revoking = "partition", in.Group, in.Revoking
		}
		if in.Held {
			li.Holder, li.Token, li.RemainingMS = in.Holder.Node.Name, in.Token, in.Remaining.Milliseconds()
		}
		for _, w := range in.Waiters {
			li.Waiters = append(li.Waiters, w.Node.Name)
		}
		out = append(out, li)
	}
	return out, nil
}
