package redislock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/redisproc"
	"github.com/tenurehq/tenure/internal/redisproc/redistest"
	"github.com/tenurehq/tenure/leasing"
)

// testConfig is the Config of the tests: an instance timeout that a busy
// machine running the race detector still meets.
var testConfig = Config{InstanceTimeout: 250 * time.Millisecond, RetryDelay: 50 * time.Millisecond}

func single(t *testing.T, s *redisproc.Server) *Locker {
	t.Helper()
	lk := NewSingle(s.Addr(), testConfig)
	t.Cleanup(func() { lk.Close() })
	return lk
}

func redlock(t *testing.T, servers []*redisproc.Server) *Locker {
	t.Helper()
	lk, err := NewRedlock(redistest.Addrs(servers), testConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lk.Close() })
	return lk
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// held reports whether l still believes it holds its lock.
func held(l *Lease) bool {
	select {
	case <-l.Lost():
		return false
	default:
		return time.Now().Before(l.Deadline())
	}
}

// freezeLease stops l's renewals and its deadline check, as a process
// paused by SIGSTOP or a long GC would: it neither renews nor notices that
// its lease ran out.
func freezeLease(l *Lease) {
	close(l.freeze)
	<-l.closed
}

// contend runs lockers goroutines that each take the lock rounds times
// (each through its own Locker from mk), and checks that no two are ever
// inside at once. It returns the tokens in the order of the grants.
func contend(t *testing.T, mk func() *Locker, lockers, rounds int) []uint64 {
	t.Helper()
	ctx := testCtx(t)
	var (
		inside  atomic.Int32
		overlap atomic.Int32
		mu      sync.Mutex
		tokens  []uint64
		wg      sync.WaitGroup
		failed  = make(chan error, lockers)
	)
	for range lockers {
		lk := mk()
		wg.Go(func() {
			for range rounds {
				l, err := lk.Lock(ctx, "contended", LockOptions{TTL: 5 * time.Second, Wait: 30 * time.Second})
				if err != nil {
					failed <- err
					return
				}
				if inside.Add(1) != 1 {
					overlap.Add(1)
				}
				if tok, ok := l.Token(); ok {
					mu.Lock()
					tokens = append(tokens, tok)
					mu.Unlock()
				}
				time.Sleep(3 * time.Millisecond)
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					failed <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Fatalf("a locker failed: %v", err)
	}
	if n := overlap.Load(); n > 0 {
		t.Fatalf("%d times two lockers held the lock at once", n)
	}
	return tokens
}

func TestSingleInstanceMutualExclusion(t *testing.T) {
	s := redistest.Start(t, 1)[0]
	tokens := contend(t, func() *Locker { return single(t, s) }, 6, 5)
	if len(tokens) != 30 {
		t.Fatalf("got %d tokens, want 30 (one per grant)", len(tokens))
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens do not grow with the grants: %v", tokens)
		}
	}
}

func TestRedlockMutualExclusionOnFive(t *testing.T) {
	servers := redistest.Start(t, 5)
	tokens := contend(t, func() *Locker { return redlock(t, servers) }, 6, 5)
	if len(tokens) != 0 {
		t.Fatalf("Redlock reported fencing tokens %v; it has none", tokens)
	}
}

func TestRenewalKeepsTheLockPastItsTTL(t *testing.T) {
	servers := redistest.Start(t, 5)
	for _, lk := range []*Locker{single(t, servers[0]), redlock(t, servers)} {
		t.Run(lk.String(), func(t *testing.T) {
			ctx := testCtx(t)
			l, err := lk.Lock(ctx, "renewed", LockOptions{TTL: 600 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			first := l.Deadline()
			time.Sleep(1800 * time.Millisecond) // three TTLs
			if !held(l) {
				t.Fatalf("lease lost while renewing: %v", l.Err())
			}
			if !l.Deadline().After(first) {
				t.Fatal("the deadline did not move with the renewals")
			}
			if _, err := lk.Lock(ctx, "renewed", LockOptions{}); !errors.Is(err, ErrNotAcquired) {
				t.Fatalf("a second locker got %v, want ErrNotAcquired", err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			l2, err := lk.Lock(ctx, "renewed", LockOptions{})
			if err != nil {
				t.Fatalf("after the release: %v", err)
			}
			l2.Unlock(ctx)
		})
	}
}

// A holder paused past its TTL loses the lock to another client; when it
// wakes, it still thinks it holds the lock and writes, and only the
// resource's fence, fed the single-instance token, refuses the write.
func TestPausedHolderIsFencedBySingleInstanceToken(t *testing.T) {
	s := redistest.Start(t, 1)[0]
	ctx := testCtx(t)
	var fence leasing.KeyedFence
	const ttl = 500 * time.Millisecond
	a, err := single(t, s).Lock(ctx, "job", LockOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	ta, ok := a.Token()
	if !ok || ta == 0 {
		t.Fatalf("single-instance token = %d, %v; want a token", ta, ok)
	}
	if err := fence.Admit("job", ta); err != nil {
		t.Fatalf("first write: %v", err)
	}
	freezeLease(a) // paused: no renewals
	time.Sleep(ttl + 200*time.Millisecond)

	b, err := single(t, s).Lock(ctx, "job", LockOptions{TTL: ttl, Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("the lock was not free after the holder paused past its TTL: %v", err)
	}
	defer b.Unlock(ctx)
	tb, _ := b.Token()
	if tb <= ta {
		t.Fatalf("the next holder's token %d is not above the paused holder's %d", tb, ta)
	}
	if err := fence.Admit("job", tb); err != nil {
		t.Fatalf("the new holder's write was refused: %v", err)
	}
	// The paused holder wakes and writes with its old token.
	if err := fence.Admit("job", ta); !errors.Is(err, leasing.ErrStaleToken) {
		t.Fatalf("the paused holder's late write: got %v, want ErrStaleToken", err)
	}
	// And its next renewal finds the lock gone.
	if err := a.extend(); !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "no longer ours") {
		t.Fatalf("the paused holder's renewal: got %v, want ErrLost", err)
	}
	if fence.Highest("job") != tb {
		t.Fatalf("fence at %d, want %d", fence.Highest("job"), tb)
	}
}

// With Redlock the same pause leaves nothing for the resource to check:
// both holders write, and no token tells them apart.
func TestPausedRedlockHolderHasNoToken(t *testing.T) {
	servers := redistest.Start(t, 3)
	ctx := testCtx(t)
	const ttl = 500 * time.Millisecond
	a, err := redlock(t, servers).Lock(ctx, "job", LockOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if tok, ok := a.Token(); ok || tok != 0 {
		t.Fatalf("Redlock Token() = %d, %v; want 0, false", tok, ok)
	}
	freezeLease(a)
	time.Sleep(ttl + 200*time.Millisecond)
	b, err := redlock(t, servers).Lock(ctx, "job", LockOptions{TTL: ttl, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Unlock(ctx)
	if _, ok := b.Token(); ok {
		t.Fatal("Redlock reported a token")
	}
}

func TestRedlockWithTwoOfFiveDownAndRefusedWithThree(t *testing.T) {
	servers := redistest.Start(t, 5)
	lk := redlock(t, servers)
	ctx := testCtx(t)
	const ttl = 900 * time.Millisecond
	held0, err := lk.Lock(ctx, "held", LockOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	servers[0].Kill()
	servers[1].Kill()
	l, err := lk.Lock(ctx, "fresh", LockOptions{TTL: ttl})
	if err != nil {
		t.Fatalf("two of five down: %v", err)
	}
	if _, err := redlock(t, servers).Lock(ctx, "fresh", LockOptions{}); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("a second locker with two of five down got %v, want ErrNotAcquired", err)
	}
	time.Sleep(2 * ttl)
	if !held(held0) || !held(l) {
		t.Fatalf("with two of five down the leases must keep renewing: %v, %v", held0.Err(), l.Err())
	}
	servers[2].Kill()
	if _, err := lk.Lock(ctx, "other", LockOptions{TTL: ttl}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("three of five down: got %v, want ErrUnavailable", err)
	}
	select {
	case <-held0.Lost():
		if !errors.Is(held0.Err(), ErrLost) {
			t.Fatalf("lost with %v, want ErrLost", held0.Err())
		}
	case <-time.After(2 * ttl):
		t.Fatal("a lease with three of five instances down was not lost within its TTL")
	}
	if time.Now().Before(held0.Deadline()) {
		t.Fatal("lost before its deadline while instances merely did not answer")
	}
}

// The failure Redlock's critics describe: a lock held on a bare majority
// (three of five; two were down), one of the three restarts empty (no
// persistence), the other two come back, and a second client wins a
// majority of its own: both believe they hold the lock. The first finds
// out only at its next renewal.
func TestRedlockInstanceRestartedEmptyGivesTwoHolders(t *testing.T) {
	servers := redistest.Start(t, 5)
	ctx := testCtx(t)
	const ttl = 3 * time.Second
	servers[3].Kill()
	servers[4].Kill()
	a, err := redlock(t, servers).Lock(ctx, "job", LockOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if err := servers[2].Restart(ctx); err != nil { // a crash; its key is gone
		t.Fatal(err)
	}
	for _, s := range servers[3:] {
		if err := s.StartAgain(ctx); err != nil {
			t.Fatal(err)
		}
	}
	b, err := redlock(t, servers).Lock(ctx, "job", LockOptions{TTL: ttl})
	if err != nil {
		t.Fatalf("expected the second client to win instances 3-5: %v", err)
	}
	defer b.Unlock(ctx)
	if !held(a) || !held(b) {
		t.Fatalf("want two holders at once: a held %v (%v), b held %v", held(a), a.Err(), held(b))
	}
	// What follows: a's next renewal finds three of five instances holding
	// b's value and marks a lost; b keeps the lock.
	select {
	case <-a.Lost():
		if !errors.Is(a.Err(), ErrLost) {
			t.Fatalf("a lost with %v", a.Err())
		}
	case <-time.After(ttl):
		t.Fatal("the first holder never noticed it lost the lock")
	}
	if !held(b) {
		t.Fatalf("b lost the lock: %v", b.Err())
	}
	a.Unlock(ctx) // releases where the value is a's, never b's keys
	if _, err := redlock(t, servers).Lock(ctx, "job", LockOptions{}); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("after a's release a third client got %v: a's release touched b's lock", err)
	}
}

// A release by a holder whose lock expired (it was paused) never deletes
// the next holder's lock.
func TestReleaseNeverDeletesAnotherHoldersLock(t *testing.T) {
	servers := redistest.Start(t, 5)
	for _, mk := range []func() *Locker{func() *Locker { return single(t, servers[0]) }, func() *Locker { return redlock(t, servers) }} {
		lk := mk()
		t.Run(lk.String(), func(t *testing.T) {
			ctx := testCtx(t)
			const ttl = 400 * time.Millisecond
			a, err := lk.Lock(ctx, "rel", LockOptions{TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			freezeLease(a)
			time.Sleep(ttl + 150*time.Millisecond)
			b, err := mk().Lock(ctx, "rel", LockOptions{TTL: 5 * time.Second, Wait: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Unlock(ctx); err != nil {
				t.Fatalf("a's release: %v", err)
			}
			key, _ := lk.keys("rel")
			for i, c := range lk.instances {
				v, err := c.Get(ctx, key).Result()
				if err != nil || v != b.Value() {
					t.Fatalf("instance %d holds %q (%v) after a's release, want b's value", i, v, err)
				}
			}
			if _, err := mk().Lock(ctx, "rel", LockOptions{}); !errors.Is(err, ErrNotAcquired) {
				t.Fatalf("a third client got %v, want ErrNotAcquired", err)
			}
			if err := b.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	for _, tc := range []struct {
		url    string
		fenced bool
		n      int
		bad    bool
	}{
		{url: "redis://127.0.0.1:6379", fenced: true, n: 1},
		{url: "redlock://a:1,b:2,c:3", n: 3},
		{url: "redlock://a:1,b:2,c:3,d:4,e:5/", n: 5},
		{url: "redlock://a:1,b:2", bad: true},
		{url: "redlock://a:1,a:1,b:2", bad: true},
		{url: "redis://a:1,b:2", bad: true},
		{url: "redis://nohost", bad: true},
		{url: "etcd://a:1", bad: true},
		{url: "127.0.0.1:6379", bad: true},
	} {
		lk, err := Open(tc.url, Config{})
		if tc.bad {
			if err == nil {
				t.Errorf("Open(%q) accepted", tc.url)
				lk.Close()
			}
			continue
		}
		if err != nil {
			t.Errorf("Open(%q): %v", tc.url, err)
			continue
		}
		if lk.Fenced() != tc.fenced || len(lk.Addrs()) != tc.n {
			t.Errorf("Open(%q): fenced %v, %d instances", tc.url, lk.Fenced(), len(lk.Addrs()))
		}
		lk.Close()
	}
}

func TestLockRefusesBadArguments(t *testing.T) {
	lk := NewSingle("127.0.0.1:1", Config{})
	defer lk.Close()
	ctx := testCtx(t)
	if _, err := lk.Lock(ctx, "", LockOptions{}); err == nil {
		t.Error("empty name accepted")
	}
	if _, err := lk.Lock(ctx, "x", LockOptions{TTL: time.Millisecond}); err == nil {
		t.Error("1ms TTL accepted")
	}
	if _, err := lk.Lock(ctx, "x", LockOptions{TTL: time.Second}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("no server: got %v, want ErrUnavailable", err)
	}
}
