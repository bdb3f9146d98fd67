package supervise

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// Exit codes of RunLocked when the command did not run to its end.
const (
	// ExitLockTimeout: the lock was not granted within the wait (or, tried
	// once, it was held).
	ExitLockTimeout = 3
	// ExitNoQuorum: no leader answered (no quorum), or the cluster runs in
	// available mode, where named leases are refused.
	ExitNoQuorum = 4
	// ExitLockLost: the lease was lost while the command ran; the command
	// was stopped before the lease could end.
	ExitLockLost = 5
)

// Errors a Locker's Lock wraps so that RunLocked can tell why a lease was
// not granted (the agent's own errors are told apart by the rpc sentinels).
var (
	// ErrLeaseNotGranted: the lease was held and the wait ran out
	// (ExitLockTimeout).
	ErrLeaseNotGranted = errors.New("supervise: lease not granted")
	// ErrLeaseUnavailable: the lock service could not grant anything (no
	// quorum, too few instances answering; ExitNoQuorum).
	ErrLeaseUnavailable = errors.New("supervise: lock service unavailable")
)

// Lease is a named lease this process holds, renewing itself in the
// background until Unlock: rpc.Lock through the local agent, or a lock of
// another service (leasing/redislock's Lease has this shape).
type Lease interface {
	// Name returns the lease's name.
	Name() string
	// Token returns the lease's fencing token and true, or false when the
	// service gives none (Redlock): the command then gets no TENURE_TOKEN.
	Token() (uint64, bool)
	// Deadline returns when the lease ends unless renewed, on this
	// process's clock.
	Deadline() time.Time
	// Lost returns a channel that closes when the lease is lost.
	Lost() <-chan struct{}
	// Err says why the lease was lost, nil while it is held.
	Err() error
	// Unlock releases the lease within ctx.
	Unlock(ctx context.Context) error
}

// LeaseOptions tune a Locker's Lock.
type LeaseOptions struct {
	// TTL is the lease's TTL; 0 asks for the service's default.
	TTL time.Duration
	// Wait bounds the wait: negative waits until ctx ends, 0 tries once.
	Wait time.Duration
	// Task asks for a singleton task (the tenure agent only).
	Task bool
}

// Locker grants named leases. Lock's errors wrap ErrLeaseNotGranted or
// ErrLeaseUnavailable (or the rpc package's errors, for the agent), which
// RunLocked turns into ExitLockTimeout and ExitNoQuorum.
type Locker interface {
	Lock(ctx context.Context, name string, o LeaseOptions) (Lease, error)
}

// agentLocker grants named leases through the local agent.
type agentLocker struct{ cl *rpc.Client }

// Lock asks the agent for the lease.
func (a agentLocker) Lock(ctx context.Context, name string, o LeaseOptions) (Lease, error) {
	l, err := a.cl.LockWith(ctx, name, rpc.LockOptions{TTL: o.TTL, Wait: o.Wait, Task: o.Task})
	if err != nil {
		return nil, err
	}
	return agentLease{l}, nil
}

// agentLease is an rpc.Lock as a Lease: its token always exists.
type agentLease struct{ *rpc.Lock }

// Token returns the agent's fencing token.
func (a agentLease) Token() (uint64, bool) { return a.Lock.Token(), true }

// LockConfig configures RunLocked. Of the embedded Config, Socket,
// Command, Shell, Grace, Env, Stdout, Stderr, Logger and Dial are used.
type LockConfig struct {
	Config
	// Name is the named lease.
	Name string
	// Task makes it a singleton task: the leader places it on one of the
	// hosts asking for it; the command runs whenever this host holds it,
	// and is started again after a loss or an exit, until ctx ends.
	Task bool
	// TTL is the lease's TTL; 0 asks for the agent's default.
	TTL time.Duration
	// Wait bounds the wait for a lock: negative waits as long as it takes,
	// 0 tries once. Tasks always wait.
	Wait time.Duration
	// Locker grants the lease; nil asks the local agent at Socket (the
	// only one that serves tasks).
	Locker Locker
	// RequireToken refuses a lease without a fencing token (ExitRefused):
	// the command is not started, and the lease is released.
	RequireToken bool
}

// RunLocked runs the command while this process holds the named lease:
// it waits for the lease, starts the command with TENURE_LOCK (or
// TENURE_TASK) and TENURE_TOKEN (when the lease has a fencing token) in
// its environment, keeps the lease renewed while it runs, and stops the
// command's process group (SIGTERM, then SIGKILL after the grace) a grace
// before the lease could end if a renewal fails. A lock is released when
// the command exits, and RunLocked returns the command's exit code, or
// ExitLockTimeout, ExitNoQuorum or ExitLockLost. A task runs until ctx
// ends (exit code 0), its command started again whenever the host holds
// the task. The lease comes from cfg.Locker, or from the local agent.
func RunLocked(ctx context.Context, cfg LockConfig) (int, error) {
	c, err := cfg.Config.withLockDefaults()
	if err != nil {
		return ExitRefused, err
	}
	cfg.Config = c
	log := c.Logger.With("name", cfg.Name)
	locker := cfg.Locker
	if locker == nil {
		cl, err := c.Dial(ctx, c.Socket)
		if err != nil {
			return ExitNoQuorum, fmt.Errorf("reach the agent: %w", err)
		}
		defer cl.Close()
		locker = agentLocker{cl}
	} else if cfg.Task {
		return ExitRefused, errors.New("supervise: singleton tasks are served by the tenure agent only")
	}
	wait := cfg.Wait
	if cfg.Task {
		wait = -1
	}
	delay := c.RestartDelay
	for {
		l, err := locker.Lock(ctx, cfg.Name, LeaseOptions{TTL: cfg.TTL, Wait: wait, Task: cfg.Task})
		if err != nil {
			if ctx.Err() != nil {
				return 0, nil
			}
			return lockExit(err), err
		}
		token, fenced := l.Token()
		log.Info("acquired", "token", tokenText(token, fenced), "deadline_in", time.Until(l.Deadline()).Round(time.Millisecond))
		var code int
		var runErr error
		if cfg.RequireToken && !fenced {
			code, runErr = ExitRefused, fmt.Errorf("lease %q has no fencing token and a token is required: the command was not started", cfg.Name)
		} else {
			code, runErr = holdAndRun(ctx, cfg, l, log)
		}
		uctx, cancel := context.WithTimeout(context.Background(), c.Grace)
		uerr := l.Unlock(uctx)
		cancel()
		if !cfg.Task {
			if runErr == nil && uerr != nil && !errors.Is(uerr, rpc.ErrLost) && l.Err() == nil {
				log.Warn("release", "err", uerr)
			}
			return code, runErr
		}
		if ctx.Err() != nil {
			return 0, nil
		}
		if runErr != nil {
			log.Warn("task lost; asking for it again", "err", runErr)
			delay = c.RestartDelay
		} else {
			log.Info("task command exited; asking for the task again", "exit_code", code, "after", delay)
		}
		select {
		case <-ctx.Done():
			return 0, nil
		case <-time.After(delay):
		}
		delay = min(2*delay, MaxRestartDelay)
	}
}

// tokenText is how logs show a lease's token: "none" without one.
func tokenText(token uint64, fenced bool) string {
	if !fenced {
		return "none"
	}
	return strconv.FormatUint(token, 10)
}

// withLockDefaults fills in Config's defaults for RunLocked.
func (c Config) withLockDefaults() (Config, error) {
	if len(c.Command) == 0 {
		return c, errors.New("supervise: no command")
	}
	if c.Shell && len(c.Command) != 1 {
		return c, errors.New("supervise: with Shell, give the script as one argument")
	}
	c.Socket = cmp.Or(c.Socket, rpc.DefaultSocketPath())
	c.Grace = cmp.Or(c.Grace, DefaultGrace)
	c.RestartDelay = cmp.Or(c.RestartDelay, DefaultRestartDelay)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Env == nil {
		c.Env = os.Environ()
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.Dial == nil {
		c.Dial = rpc.Dial
	}
	return c, nil
}

// holdAndRun runs the command while l is held: it returns the command's
// exit code when it exits, or ExitLockLost and why when the lease is lost
// or gets within the grace of its deadline (the command is stopped
// first); when ctx ends it stops the command and returns its exit code.
func holdAndRun(ctx context.Context, cfg LockConfig, l Lease, log *slog.Logger) (int, error) {
	if left := time.Until(l.Deadline()); cfg.Grace >= left/2 {
		return ExitRefused, fmt.Errorf("the grace %v does not fit in the lease (%v left at the grant): give a longer --ttl or a shorter --grace", cfg.Grace, left.Round(time.Millisecond))
	}
	kind := "TENURE_LOCK"
	if cfg.Task {
		kind = "TENURE_TASK"
	}
	env := slices.DeleteFunc(slices.Clone(cfg.Env), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == "TENURE_LOCK" || name == "TENURE_TASK" || name == "TENURE_TOKEN"
	})
	env = append(env, kind+"="+cfg.Name)
	token, fenced := l.Token()
	if fenced {
		env = append(env, "TENURE_TOKEN="+strconv.FormatUint(token, 10))
	}
	ch, err := startChildEnv(cfg.Config, term{epoch: token}, env)
	if err != nil {
		return ExitCannotStart, fmt.Errorf("start %q: %w", cfg.Command[0], err)
	}
	check := time.NewTicker(50 * time.Millisecond)
	defer check.Stop()
	for {
		select {
		case <-ch.exited:
			ch.finishOutput(cfg.Grace)
			log.Info("command exited", ch.exitAttrs()...)
			return ch.exitCode(), nil
		case <-l.Lost():
			log.Warn("lease lost: stopping the command", "err", l.Err())
			ch.stop(cfg.Grace)
			return ExitLockLost, fmt.Errorf("lease %q lost: %w", cfg.Name, l.Err())
		case <-check.C:
			if left := time.Until(l.Deadline()); left <= cfg.Grace {
				log.Warn("lease not renewed in time: stopping the command before it ends", "left", left.Round(time.Millisecond))
				ch.stop(cfg.Grace)
				return ExitLockLost, fmt.Errorf("lease %q was not renewed in time (%v left): the command was stopped", cfg.Name, left.Round(time.Millisecond))
			}
		case <-ctx.Done():
			ch.stop(cfg.Grace)
			return ch.exitCode(), nil
		}
	}
}

// lockExit maps a failed acquire to RunLocked's exit code.
func lockExit(err error) int {
	switch {
	case errors.Is(err, ErrLeaseNotGranted):
		return ExitLockTimeout
	case errors.Is(err, ErrLeaseUnavailable):
		return ExitNoQuorum
	case errors.Is(err, rpc.ErrTimeout):
		return ExitLockTimeout
	case errors.Is(err, rpc.ErrInvalidArgument) && strings.Contains(err.Error(), "quorum"):
		return ExitNoQuorum
	case errors.Is(err, rpc.ErrInvalidArgument):
		return ExitRefused
	}
	return ExitNoQuorum
}
