package redislock

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Defaults for the fields of Config and LockOptions left zero.
const (
	// DefaultTTL is a lock's TTL when LockOptions.TTL is zero.
	DefaultTTL = 30 * time.Second
	// DefaultDriftFactor is the clock drift allowance, a fraction of the
	// TTL, that Redlock's description suggests.
	DefaultDriftFactor = 0.01
	// DefaultRetryDelay is the mean random delay between two attempts.
	DefaultRetryDelay = 200 * time.Millisecond
	// DefaultKeyPrefix starts every key this package writes.
	DefaultKeyPrefix = "tenure:lock:"

	// minDrift is the drift allowance added to DriftFactor × TTL: Redis's
	// expire precision (Redlock's description: 2 ms).
	minDrift = 2 * time.Millisecond
	// minTTL is the shortest TTL accepted.
	minTTL = 100 * time.Millisecond
)

// Errors wrapped by Lock, a lost Lease's Err and Unlock.
var (
	// ErrNotAcquired: the lock is held by someone else (or, for Redlock, no
	// majority of the instances was free in time) and the wait ran out.
	ErrNotAcquired = errors.New("redislock: lock not acquired")
	// ErrUnavailable: too few instances answered to reach a majority.
	ErrUnavailable = errors.New("redislock: too few Redis instances answered")
	// ErrLost: a held lock was lost: a renewal found it no longer ours on
	// enough instances, or its deadline passed before a renewal succeeded.
	ErrLost = errors.New("redislock: lock lost")
)

// Config configures a Locker.
type Config struct {
	// InstanceTimeout bounds each command to one instance; it must be far
	// below the TTL (Redlock's description: 5-50 ms for a 10 s TTL).
	// Default: TTL/100, at least 20 ms and at most 200 ms.
	InstanceTimeout time.Duration
	// DriftFactor is the clock drift allowance as a fraction of the TTL;
	// default DefaultDriftFactor.
	DriftFactor float64
	// RetryDelay is the mean random delay between attempts; default
	// DefaultRetryDelay.
	RetryDelay time.Duration
	// KeyPrefix starts the lock's key (PREFIX{NAME}) and its token counter
	// (PREFIX{NAME}:token); default DefaultKeyPrefix.
	KeyPrefix string
	// Logger receives renewal failures; default: discard.
	Logger *slog.Logger
}

// LockOptions tune Locker.Lock.
type LockOptions struct {
	// TTL is the lock's TTL; default DefaultTTL.
	TTL time.Duration
	// Wait bounds the wait for the lock: 0 tries once, negative waits until
	// ctx ends.
	Wait time.Duration
}

// Locker takes named locks on one Redis instance (NewSingle, with a fencing
// token) or by Redlock over several (NewRedlock, without one). It is safe
// for concurrent use.
type Locker struct {
	cfg       Config
	instances []*redis.Client
	addrs     []string
	fenced    bool
}

// NewSingle returns a Locker on the one Redis instance at addr
// (HOST:PORT), whose leases carry a fencing token.
func NewSingle(addr string, cfg Config) *Locker {
	return newLocker([]string{addr}, cfg, true)
}

// NewRedlock returns a Locker running Redlock over the independent
// instances at addrs (HOST:PORT each, an odd number of at least three
// recommended). Its leases carry no fencing token.
func NewRedlock(addrs []string, cfg Config) (*Locker, error) {
	if len(addrs) == 0 {
		return nil, errors.New("redislock: Redlock needs at least one instance")
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			return nil, fmt.Errorf("redislock: instance %s given twice: Redlock's majority needs independent instances", a)
		}
		seen[a] = true
	}
	return newLocker(addrs, cfg, false), nil
}

// Open returns the Locker a backend URL names: redis://HOST:PORT for the
// single-instance lock, redlock://H1:P1,H2:P2,H3:P3 for Redlock (at least
// three instances).
func Open(backend string, cfg Config) (*Locker, error) {
	scheme, rest, ok := strings.Cut(backend, "://")
	if !ok || rest == "" {
		return nil, fmt.Errorf("redislock: backend %q: want redis://HOST:PORT or redlock://H1:P1,H2:P2,H3:P3", backend)
	}
	rest = strings.TrimSuffix(rest, "/")
	var addrs []string
	for _, a := range strings.Split(rest, ",") {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || port == "" {
			return nil, fmt.Errorf("redislock: backend %q: %q is not HOST:PORT", backend, a)
		}
		addrs = append(addrs, a)
	}
	switch scheme {
	case "redis":
		if len(addrs) != 1 {
			return nil, fmt.Errorf("redislock: backend %q: redis:// takes one instance; use redlock:// for several", backend)
		}
		if _, err := url.Parse(backend); err != nil {
			return nil, fmt.Errorf("redislock: backend %q: %w", backend, err)
		}
		return NewSingle(addrs[0], cfg), nil
	case "redlock":
		if len(addrs) < 3 {
			return nil, fmt.Errorf("redislock: backend %q: Redlock needs at least three independent instances, got %d", backend, len(addrs))
		}
		return NewRedlock(addrs, cfg)
	}
	return nil, fmt.Errorf("redislock: backend %q: unknown scheme %q (redis or redlock)", backend, scheme)
}

// newLocker builds a Locker with one client per address.
func newLocker(addrs []string, cfg Config, fenced bool) *Locker {
	cfg.DriftFactor = cmp.Or(cfg.DriftFactor, DefaultDriftFactor)
	cfg.RetryDelay = cmp.Or(cfg.RetryDelay, DefaultRetryDelay)
	cfg.KeyPrefix = cmp.Or(cfg.KeyPrefix, DefaultKeyPrefix)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Locker{cfg: cfg, addrs: addrs, fenced: fenced}
	for _, a := range addrs {
		l.instances = append(l.instances, redis.NewClient(&redis.Options{
			Addr:                     a,
			Protocol:                 2,
			DisableIdentity:          true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
			MaxRetries:               -1,
			DialerRetries:            1,
			DialTimeout:              time.Second,
			ContextTimeoutEnabled:    true,
			PoolSize:                 4,
		}))
	}
	return l
}

// Fenced reports whether the Locker's leases carry a fencing token (the
// single-instance lock does; Redlock does not).
func (lk *Locker) Fenced() bool { return lk.fenced }

// Addrs returns the instances' addresses.
func (lk *Locker) Addrs() []string { return append([]string(nil), lk.addrs...) }

// Quorum is the number of instances that must grant a lock: N/2+1.
func (lk *Locker) Quorum() int { return len(lk.instances)/2 + 1 }

// String names the backend: redis://ADDR or redlock://A1,A2,...
func (lk *Locker) String() string {
	if lk.fenced {
		return "redis://" + lk.addrs[0]
	}
	return "redlock://" + strings.Join(lk.addrs, ",")
}

// Close closes the connections to the instances; leases still held are
// left to expire.
func (lk *Locker) Close() error {
	var errs []error
	for i, c := range lk.instances {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("redislock: close %s: %w", lk.addrs[i], err))
		}
	}
	return errors.Join(errs...)
}

// Lua scripts. KEYS[1] is the lock's key, KEYS[2] its token counter;
// ARGV[1] the holder's random value, ARGV[2] the TTL in milliseconds.
var (
	// acquireFenced sets the key if absent and, in the same atomic step,
	// returns the next token of the name; 0 when the key is held.
	acquireFenced = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0`)
	// renew extends the key's expiry only while it holds our value.
	renew = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)
	// release deletes the key only while it holds our value: never
	// another holder's lock.
	release = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
)

// keys returns the lock's key and its token counter's key; the name is a
// hash tag, so both live in one slot of a Redis Cluster.
func (lk *Locker) keys(name string) (lock, counter string) {
	lock = lk.cfg.KeyPrefix + "{" + name + "}"
	return lock, lock + ":token"
}

// instanceTimeout is the bound on one command to one instance.
func (lk *Locker) instanceTimeout(ttl time.Duration) time.Duration {
	if lk.cfg.InstanceTimeout > 0 {
		return lk.cfg.InstanceTimeout
	}
	return min(max(ttl/100, 20*time.Millisecond), 200*time.Millisecond)
}

// drift is the clock drift allowance for ttl.
func (lk *Locker) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*lk.cfg.DriftFactor) + minDrift
}

// outcome counts the instances' answers to one round of commands.
type outcome struct {
	ok      int     // granted (or extended, or released)
	refused int     // answered no: the key holds another value
	errs    []error // did not answer in time, or failed
	token   uint64  // the single instance's token (acquire)
}

// each runs f on every instance in parallel, each within the instance
// timeout, and counts the answers: f returns (true, nil) for a yes.
func (lk *Locker) each(ctx context.Context, ttl time.Duration, f func(ctx context.Context, c *redis.Client) (bool, uint64, error)) outcome {
	var (
		mu  sync.Mutex
		out outcome
		wg  sync.WaitGroup
	)
	for i, c := range lk.instances {
		wg.Go(func() {
			ictx, cancel := context.WithTimeout(ctx, lk.instanceTimeout(ttl))
			defer cancel()
			yes, token, err := f(ictx, c)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				out.errs = append(out.errs, fmt.Errorf("%s: %w", lk.addrs[i], err))
			case yes:
				out.ok++
				out.token = token
			default:
				out.refused++
			}
		})
	}
	wg.Wait()
	return out
}

// Lock takes the named lock: it tries until it holds it, o.Wait runs out
// (an error wrapping ErrNotAcquired, or ErrUnavailable when too few
// instances answered the last attempt), or ctx ends.
func (lk *Locker) Lock(ctx context.Context, name string, o LockOptions) (*Lease, error) {
	if name == "" || len(name) > 256 {
		return nil, fmt.Errorf("redislock: lock name must be 1 to 256 bytes, got %d", len(name))
	}
	ttl := cmp.Or(o.TTL, DefaultTTL)
	if ttl < minTTL {
		return nil, fmt.Errorf("redislock: TTL %v is below %v", ttl, minTTL)
	}
	var until time.Time
	if o.Wait > 0 {
		until = time.Now().Add(o.Wait)
	}
	for {
		l, err := lk.tryLock(ctx, name, ttl)
		if err == nil {
			return l, nil
		}
		if o.Wait == 0 {
			return nil, err
		}
		delay := lk.cfg.RetryDelay/2 + rand.N(lk.cfg.RetryDelay)
		if !until.IsZero() && time.Now().Add(delay).After(until) {
			return nil, fmt.Errorf("%w (waited %v)", err, o.Wait)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("redislock: lock %q: %w", name, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// tryLock makes one attempt at the lock on every instance.
func (lk *Locker) tryLock(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	value, err := randomValue()
	if err != nil {
		return nil, err
	}
	key, counter := lk.keys(name)
	start := time.Now()
	out := lk.each(ctx, ttl, func(ctx context.Context, c *redis.Client) (bool, uint64, error) {
		if lk.fenced {
			n, err := acquireFenced.Run(ctx, c, []string{key, counter}, value, ttl.Milliseconds()).Int64()
			return n > 0, uint64(max(n, 0)), err
		}
		ok, err := c.SetNX(ctx, key, value, ttl).Result()
		return ok, 0, err
	})
	validity := ttl - time.Since(start) - lk.drift(ttl)
	if out.ok >= lk.Quorum() && validity > 0 {
		l := &Lease{lk: lk, name: name, key: key, value: value, ttl: ttl, token: out.token,
			deadline: start.Add(ttl - lk.drift(ttl)),
			lost:     make(chan struct{}), done: make(chan struct{}), closed: make(chan struct{}), freeze: make(chan struct{})}
		go l.run()
		return l, nil
	}
	// Not held: release on every instance, also those that did not answer
	// (they may have set the key after all).
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lk.instanceTimeout(ttl)*2)
	lk.releaseAll(rctx, key, value, ttl)
	cancel()
	if len(out.errs) > len(lk.instances)-lk.Quorum() {
		return nil, fmt.Errorf("%w: lock %q: %d of %d instances did not answer, %d needed: %w",
			ErrUnavailable, name, len(out.errs), len(lk.instances), lk.Quorum(), joinErrs(out.errs))
	}
	if out.ok >= lk.Quorum() {
		return nil, fmt.Errorf("%w: lock %q: a majority granted it, but acquiring took longer than the TTL allows", ErrNotAcquired, name)
	}
	return nil, fmt.Errorf("%w: lock %q is held (granted by %d of %d instances, %d needed)", ErrNotAcquired, name, out.ok, len(lk.instances), lk.Quorum())
}

// releaseAll runs the compare-and-delete script on every instance.
func (lk *Locker) releaseAll(ctx context.Context, key, value string, ttl time.Duration) outcome {
	return lk.each(ctx, ttl, func(ctx context.Context, c *redis.Client) (bool, uint64, error) {
		n, err := release.Run(ctx, c, []string{key}, value).Int64()
		return n == 1, 0, err
	})
}

// randomValue returns a holder's unique value: 20 random bytes in hex.
func randomValue() (string, error) {
	b := make([]byte, 20)
	if _, err := crand.Read(b); err != nil {
		return "", fmt.Errorf("redislock: random value: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// SetRedisLogger sends the Redis client library's own messages (failed
// dials of the connection pool, which it prints to stderr by default) to
// logger at debug level. It sets a process-wide logger of
// github.com/redis/go-redis, so programs call it once at start.
func SetRedisLogger(logger *slog.Logger) {
	redis.SetLogger(redisLogger{logger})
}

// redisLogger adapts slog to go-redis's logging interface.
type redisLogger struct{ l *slog.Logger }

// Printf logs one go-redis message at debug level.
func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.DebugContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
}

// instanceErrors is the errors of several instances, on one line.
type instanceErrors []error

// Error joins the errors with "; ".
func (e instanceErrors) Error() string {
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

// Unwrap returns the instances' errors.
func (e instanceErrors) Unwrap() []error { return e }

// joinErrs returns errs as one error, nil when there are none.
func joinErrs(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return instanceErrors(errs)
}
