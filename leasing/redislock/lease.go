package redislock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lease is a lock held in Redis, with the shape of tenure's rpc.Lock: it
// renews itself every TTL/3 until Unlock or until it is lost. When a
// renewal finds the lock no longer ours on enough instances, or the
// deadline passes before a renewal succeeds, Lost's channel closes and
// the holder must stop acting on it.
type Lease struct {
	lk    *Locker
	name  string
	key   string
	value string
	ttl   time.Duration
	token uint64

	mu       sync.Mutex
	deadline time.Time
	err      error // why it was lost; written before lost closes

	lost   chan struct{}
	done   chan struct{} // closed by Unlock
	closed chan struct{} // closed when run has returned
	// freeze stops run without marking the lease lost: a process paused
	// past its TTL, for tests.
	freeze     chan struct{}
	unlockOnce sync.Once
}

// Name returns the lock's name.
func (l *Lease) Name() string { return l.name }

// Token returns the lease's fencing token and true for the
// single-instance lock: it grows with every grant of the name, as long as
// Redis keeps the counter. Redlock has no fencing token: (0, false).
func (l *Lease) Token() (uint64, bool) {
	if !l.lk.fenced {
		return 0, false
	}
	return l.token, true
}

// Value returns the random value that marks the lock as this holder's.
func (l *Lease) Value() string { return l.value }

// TTL returns the lease's TTL.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Deadline returns when the lease ends unless renewed, by this process's
// clock: the start of the last successful acquire or renewal plus the TTL,
// less the drift allowance.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Lost returns a channel that closes when the lease is lost.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err says why the lease was lost (nil while it is held); it wraps ErrLost.
func (l *Lease) Err() error {
	select {
	case <-l.lost:
		return l.err
	default:
		return nil
	}
}

// lose closes Lost with err, once.
func (l *Lease) lose(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.lost:
	default:
		l.err = err
		close(l.lost)
	}
}

// run renews the lease every TTL/3 and marks it lost when a renewal finds
// it no longer ours, or when its deadline passes first.
func (l *Lease) run() {
	defer close(l.closed)
	tick := time.NewTicker(max(l.ttl/3, 10*time.Millisecond))
	defer tick.Stop()
	for {
		expiry := time.NewTimer(time.Until(l.Deadline()))
		select {
		case <-tick.C:
			if err := l.extend(); err != nil {
				l.lose(err)
			}
		case <-expiry.C:
			l.lose(fmt.Errorf("%w: %q: its deadline passed before a renewal succeeded", ErrLost, l.name))
		case <-l.done:
			expiry.Stop()
			return
		case <-l.freeze:
			expiry.Stop()
			return
		}
		expiry.Stop()
		select {
		case <-l.lost:
			return
		default:
		}
	}
}

// extend runs the renew script on every instance: the lease is extended
// when a majority still held our value and extended it, within the
// validity. It returns an error wrapping ErrLost when too many instances
// answered that the lock is no longer ours for a majority to remain; when
// instances merely did not answer it logs and returns nil, and the next
// tick tries again (the deadline bounds how long).
func (l *Lease) extend() error {
	lk := l.lk
	start := time.Now()
	out := lk.each(context.Background(), l.ttl, func(ctx context.Context, c *redis.Client) (bool, uint64, error) {
		n, err := renew.Run(ctx, c, []string{l.key}, l.value, l.ttl.Milliseconds()).Int64()
		return n == 1, 0, err
	})
	n := len(lk.instances)
	if out.refused > n-lk.Quorum() {
		return fmt.Errorf("%w: %q is no longer ours on %d of %d instances (it expired, or an instance lost it)", ErrLost, l.name, out.refused, n)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !start.Before(l.deadline) {
		return fmt.Errorf("%w: %q: its deadline passed before a renewal succeeded", ErrLost, l.name)
	}
	if out.ok >= lk.Quorum() && l.ttl-time.Since(start)-lk.drift(l.ttl) > 0 {
		l.deadline = start.Add(l.ttl - lk.drift(l.ttl))
		return nil
	}
	lk.cfg.Logger.Warn("redislock: renewal failed; trying again until the deadline",
		"name", l.name, "extended", out.ok, "instances", n, "err", joinErrs(out.errs))
	return nil
}

// Unlock stops the renewals and releases the lock on every instance by
// compare-and-delete (never deleting another holder's lock), within ctx.
// Unlocking a lost lease still releases it where it is ours, and returns
// why it was lost.
func (l *Lease) Unlock(ctx context.Context) error {
	l.unlockOnce.Do(func() { close(l.done) })
	<-l.closed
	out := l.lk.releaseAll(ctx, l.key, l.value, l.ttl)
	if err := l.Err(); err != nil {
		return err
	}
	if len(out.errs) > 0 {
		return fmt.Errorf("redislock: unlock %q: %d of %d instances did not answer (the lock expires there): %w",
			l.name, len(out.errs), len(l.lk.instances), joinErrs(out.errs))
	}
	return nil
}
