package supervise

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tenurehq/tenure/internal/broken"
	"github.com/tenurehq/tenure/rpc"
)

// Run runs cfg.Command while the local agent leads (see the package
// documentation) until ctx ends, or, with cfg.Once, until the command exits
// by itself while this node leads.
//
// With Once, Run returns the command's exit code (128+N for a signal N) and
// a nil error; if the command cannot be started at all it returns
// ExitCannotStart and the error. If the agent refuses to register Run as
// a runner (a Grace longer than the agent's lease TTL), Run returns
// ExitRefused and the error at once: the command could never run. When
// ctx ends, Run returns 0 and nil: a
// requested stop is not a failure. An invalid cfg returns 0 and an error
// before anything starts. Run returns only after the command's process
// group and all of Run's goroutines are gone.
func Run(ctx context.Context, cfg Config) (exitCode int, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return 0, err
	}
	news := make(chan observation)
	// The observer's connection outlives ctx until the loop has stopped the
	// command: the agent takes a closed connection as "stopped".
	octx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		(&observer{cfg: cfg, out: news}).run(octx)
	}()
	defer wg.Wait()
	defer cancel()
	s := &supervisor{cfg: cfg, log: cfg.Logger, delay: cfg.RestartDelay, wake: time.NewTimer(0), owed: map[uint64]bool{}}
	s.wake.Stop()
	return s.loop(ctx, news)
}

// supervisor is Run's state; only Run's goroutine touches it.
type supervisor struct {
	cfg   Config
	log   *slog.Logger
	view  view
	child *child // nil when the command is not running

	downLogged bool // the agent's unreachability was logged at Warn

	lastTerm  term          // the term of the latest start
	delay     time.Duration // the next restart delay
	retryTerm term          // a restart for retryTerm waits until retryAt
	retryAt   time.Time
	wake      *time.Timer // fires at the next restart or lease recheck

	// conn is the current connection's runner watch (nil when down); owed
	// are the terms its stream said this node leads that it has not
	// reported stopped yet (report.go).
	conn       *rpc.Watcher
	owed       map[uint64]bool
	registered uint64 // the term of the group registered on conn; 0: none
}

// outcome ends Run when done is set.
type outcome struct {
	done bool
	code int
	err  error
}

// loop reacts to news, the command's exit and timers until it is done.
func (s *supervisor) loop(ctx context.Context, news <-chan observation) (int, error) {
	defer s.wake.Stop()
	for {
		var out outcome
		select {
		case <-ctx.Done():
			s.stopChild("tenure run is stopping")
			s.reportFinal()
			return 0, nil
		case ob := <-news:
			if ob.kind == obsRefused {
				out = outcome{done: true, code: ExitRefused, err: fmt.Errorf("supervise: the agent refuses to run the command: %w", ob.err)}
				break
			}
			s.apply(ob)
		case <-s.exited():
			out = s.onExit()
		case <-s.wake.C:
		}
		if !out.done {
			out = s.reconcile(news)
		}
		if out.done {
			s.stopChild("tenure run is stopping")
			s.reportFinal()
		}
		s.reportStopped()
		if out.done {
			return out.code, out.err
		}
	}
}

// exited is the running command's exit channel, or nil.
func (s *supervisor) exited() <-chan struct{} {
	if s.child == nil {
		return nil
	}
	return s.child.exited
}

// apply records an observation, logging changes of connection.
func (s *supervisor) apply(ob observation) {
	was := s.view.connected
	switch ob.kind {
	case obsStatus:
		s.view.applyStatus(ob.status, ob.sentAt)
	case obsEvent:
		s.view.applyEvent(ob.event)
		s.noteTerm(ob.event)
	case obsWatch:
		s.conn, s.owed, s.registered = ob.watch, map[uint64]bool{}, 0
		s.sendRunning() // a command started before this connection
	case obsDown:
		s.view.disconnect()
		// The agent forgot the registration: nothing is owed to it now.
		s.conn, s.owed, s.registered = nil, map[uint64]bool{}, 0
		level := slog.LevelDebug // said already
		if !s.downLogged {
			level, s.downLogged = slog.LevelWarn, true
		}
		s.log.Log(context.Background(), level, "supervise: cannot reach the agent; retrying",
			"socket", s.cfg.Socket, "err", ob.err, "retry_every", s.cfg.RetryInterval)
	}
	if !was && s.view.connected {
		s.downLogged = false
		s.log.Info("supervise: connected to the agent", "socket", s.cfg.Socket)
	}
}

// reconcile makes the command run or not, as the view says. After stopping
// a command for a new term it reads the news that came meanwhile before it
// starts the next one.
func (s *supervisor) reconcile(news <-chan observation) outcome {
	for {
		now := time.Now()
		t, run, why := s.view.verdict(now, s.cfg.Grace)
		switch {
		case !run && broken.Is(broken.RunKeepsChild):
			// A deliberately broken test build: the command outlives the lease.
		case !run:
			s.stopChild(why)
		case s.child != nil && s.child.term == t:
		case s.child != nil:
			s.stopChild("the term changed")
			s.drain(news)
			continue
		case t == s.retryTerm && now.Before(s.retryAt):
		default:
			if out := s.start(t); out.done {
				return out
			}
		}
		s.armWake(run)
		return outcome{}
	}
}

// drain applies the observations that are ready, without waiting.
func (s *supervisor) drain(news <-chan observation) {
	for {
		select {
		case ob := <-news:
			s.apply(ob)
		default:
			return
		}
	}
}

// armWake sets the timer for the next restart or lease recheck, if any.
func (s *supervisor) armWake(running bool) {
	var at time.Time
	if running {
		at = s.view.recheckAt(s.cfg.Grace)
	}
	if s.child == nil && !s.retryAt.IsZero() && (at.IsZero() || s.retryAt.Before(at)) {
		at = s.retryAt
	}
	s.wake.Stop()
	if !at.IsZero() {
		s.wake.Reset(max(time.Until(at), 0))
	}
}

// start starts the command for t. A command that cannot start counts as
// one that exited at once.
func (s *supervisor) start(t term) outcome {
	if t != s.lastTerm {
		s.lastTerm, s.delay = t, s.cfg.RestartDelay
	}
	s.retryAt = time.Time{}
	c, err := startChild(s.cfg, t)
	if err != nil {
		s.log.Error("supervise: cannot start the command", "err", err, "epoch", t.epoch)
		if s.cfg.Once {
			return outcome{done: true, code: ExitCannotStart, err: err}
		}
		s.scheduleRestart(t, 0)
		return outcome{}
	}
	s.child = c
	s.log.Info("supervise: started the command", "pid", c.pid(), "epoch", t.epoch, "leader", t.leader)
	s.sendRunning()
	return outcome{}
}

// onExit handles a command that exited by itself.
func (s *supervisor) onExit() outcome {
	c := s.child
	s.child = nil
	c.stop(s.cfg.Grace) // whatever it left in its group
	level := slog.LevelInfo
	if c.exitCode() != 0 {
		level = slog.LevelWarn
	}
	s.log.Log(context.Background(), level, "supervise: the command exited by itself", c.exitAttrs()...)
	if s.cfg.Once {
		return outcome{done: true, code: c.exitCode()}
	}
	s.scheduleRestart(c.term, time.Since(c.started))
	return outcome{}
}

// scheduleRestart delays the next start for t, doubling the delay after a
// run shorter than MaxRestartDelay.
func (s *supervisor) scheduleRestart(t term, ran time.Duration) {
	if ran >= MaxRestartDelay {
		s.delay = s.cfg.RestartDelay
	}
	s.retryTerm, s.retryAt = t, time.Now().Add(s.delay)
	s.log.Info("supervise: restarting the command after a delay", "delay", s.delay, "epoch", t.epoch)
	s.delay = min(2*s.delay, max(MaxRestartDelay, s.cfg.RestartDelay))
}

// stopChild stops the running command, if any, and logs why and how.
func (s *supervisor) stopChild(why string) {
	c := s.child
	if c == nil {
		return
	}
	s.child = nil
	s.log.Info("supervise: stopping the command", "reason", why, "pid", c.pid(), "epoch", c.term.epoch)
	killed := c.stop(s.cfg.Grace)
	attrs := c.exitAttrs()
	if killed {
		attrs = append(attrs, "killed_after_grace", s.cfg.Grace)
	}
	s.log.Info("supervise: the command stopped", attrs...)
}
