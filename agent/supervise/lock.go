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
}

// RunLocked runs the command while this process holds the named lease:
// it waits for the lease, starts the command with TENURE_LOCK (or
// TENURE_TASK) and TENURE_TOKEN in its environment, keeps the lease
// renewed while it runs, and stops the command's process group (SIGTERM,
// then SIGKILL after the grace) a grace before the lease could end if a
// renewal fails. A lock is released when the command exits, and RunLocked
// returns the command's exit code, or ExitLockTimeout, ExitNoQuorum or
// ExitLockLost. A task runs until ctx ends (exit code 0), its command
// started again whenever the host holds the task.
func RunLocked(ctx context.Context, cfg LockConfig) (int, error) {
	c, err := cfg.Config.withLockDefaults()
	if err != nil {
		return ExitRefused, err
	}
	cfg.Config = c
	log := c.Logger.With("name", cfg.Name)
	cl, err := c.Dial(ctx, c.Socket)
	if err != nil {
		return ExitNoQuorum, fmt.Errorf("reach the agent: %w", err)
	}
	defer cl.Close()
	wait := cfg.Wait
	if cfg.Task {
		wait = -1
	}
	delay := c.RestartDelay
	for {
		l, err := cl.LockWith(ctx, cfg.Name, rpc.LockOptions{TTL: cfg.TTL, Wait: wait, Task: cfg.Task})
		if err != nil {
			if ctx.Err() != nil {
				return 0, nil
			}
			return lockExit(err), err
		}
		log.Info("acquired", "token", l.Token(), "deadline_in", time.Until(l.Deadline()).Round(time.Millisecond))
		code, runErr := holdAndRun(ctx, cfg, l, log)
		uctx, cancel := context.WithTimeout(context.Background(), c.Grace)
		uerr := l.Unlock(uctx)
		cancel()
		if !cfg.Task {
			if runErr == nil && uerr != nil && !errors.Is(uerr, rpc.ErrLost) {
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
func holdAndRun(ctx context.Context, cfg LockConfig, l *rpc.Lock, log *slog.Logger) (int, error) {
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
	env = append(env, kind+"="+cfg.Name, "TENURE_TOKEN="+strconv.FormatUint(l.Token(), 10))
	ch, err := startChildEnv(cfg.Config, term{epoch: l.Token()}, env)
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
	case errors.Is(err, rpc.ErrTimeout):
		return ExitLockTimeout
	case errors.Is(err, rpc.ErrInvalidArgument) && strings.Contains(err.Error(), "quorum"):
		return ExitNoQuorum
	case errors.Is(err, rpc.ErrInvalidArgument):
		return ExitRefused
	}
	return ExitNoQuorum
}
