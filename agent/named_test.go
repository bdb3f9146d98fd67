package agent

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// TestLocksOverSockets: three real agents; clients on two of them contend
// for one lock through their own agent's socket. The holder's token is
// fenced against the next one's, the waiter gets the lock when the holder
// unlocks, a try-once while it is held times out, Locks lists holder and
// waiter, and a client that leaves while waiting is dropped from the queue.
func TestLocksOverSockets(t *testing.T) {
	c := newTestCluster(t)
	c.startN(3)
	c.waitLeader("n3", 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl1 := dialAgent(t, c.agents["n1"])
	cl2 := dialAgent(t, c.agents["n2"])

	first, err := cl1.Lock(ctx, "db")
	if err != nil {
		t.Fatalf("lock on n1: %v", err)
	}
	if first.Token() == 0 {
		t.Fatal("no token")
	}
	if _, err := cl2.TryLock(ctx, "db"); !errors.Is(err, rpc.ErrTimeout) {
		t.Fatalf("try-once of a held lock: %v, want ErrTimeout", err)
	}
	// A waiter that gives up is dropped from the queue.
	gaveUp, giveUp := context.WithCancel(ctx)
	go func() { time.Sleep(300 * time.Millisecond); giveUp() }()
	if _, err := cl2.Lock(gaveUp, "db"); !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned wait: %v", err)
	}
	var second *rpc.Lock
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var err error
		second, err = cl2.Lock(ctx, "db")
		if err != nil {
			t.Errorf("lock on n2: %v", err)
		}
	}()
	eventually(t, 10*time.Second, func() error {
		ls, err := cl1.Locks(ctx)
		if err != nil {
			return err
		}
		if len(ls) != 1 || ls[0].Holder != "n1" || len(ls[0].Waiters) != 1 || ls[0].Waiters[0] != "n2" {
			return errors.New("want db held by n1 with n2 waiting (once)")
		}
		return nil
	})
	time.Sleep(2 * testTTL) // renewals keep the lock held meanwhile
	select {
	case <-first.Lost():
		t.Fatalf("the lock was lost while held: %v", first.Err())
	default:
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatalf("unlock: %v", err)
	}
	wg.Wait()
	if second == nil {
		t.FailNow()
	}
	if second.Token() <= first.Token() {
		t.Fatalf("second token %#x not above the first %#x", second.Token(), first.Token())
	}
	if err := second.Unlock(ctx); err != nil {
		t.Fatalf("unlock: %v", err)
	}
}

// TestLockErrors: bad names and TTLs are refused with invalid_argument and
// the agent keeps serving.
func TestLockErrors(t *testing.T) {
	c := newTestCluster(t)
	c.startN(1)
	c.waitLeader("n1", 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := dialAgent(t, c.agents["n1"])
	for _, tc := range []struct {
		name string
		ttl  time.Duration
	}{{"", 0}, {string(make([]byte, 200)), 0}, {"a b", 0}, {"ok", 10 * time.Millisecond}, {"ok", time.Hour}} {
		if _, err := cl.LockWith(ctx, tc.name, rpc.LockOptions{TTL: tc.ttl}); !errors.Is(err, rpc.ErrInvalidArgument) {
			t.Errorf("lock %q ttl %v: %v, want ErrInvalidArgument", tc.name, tc.ttl, err)
		}
	}
	if _, err := cl.Status(ctx); err != nil {
		t.Fatalf("the agent stopped serving: %v", err)
	}
}

func dialAgent(t *testing.T, a *Agent) *rpc.Client {
	t.Helper()
	cl, err := rpc.Dial(context.Background(), a.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// TestTaskEventsReachWatchers: a task acquired and released through a
// socket is told to watchers as task-acquired and task-lost, with the
// task's name and token.
func TestTaskEventsReachWatchers(t *testing.T) {
	c := newTestCluster(t)
	c.startN(1)
	c.waitLeader("n1", 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := dialAgent(t, c.agents["n1"])
	w, err := cl.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	l, err := cl.LockWith(ctx, "nightly", rpc.LockOptions{Wait: -1, Task: true})
	if err != nil {
		t.Fatal(err)
	}
	next := func(want string) rpc.Event {
		for {
			ev, err := w.Next(ctx)
			if err != nil {
				t.Fatalf("waiting for %s: %v", want, err)
			}
			if ev.Event == want {
				return ev
			}
		}
	}
	if ev := next(rpc.EventTaskAcquired); ev.Task != "nightly" || ev.Token != l.Token() {
		t.Fatalf("task-acquired = %+v, want nightly with token %d", ev, l.Token())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := next(rpc.EventTaskLost); ev.Task != "nightly" || ev.Token != l.Token() {
		t.Fatalf("task-lost = %+v", ev)
	}
}

// TestLockRefusedInAvailableMode: without a quorum there is no safe lease,
// so a lock request gets invalid_argument saying why, and the agent keeps
// serving.
func TestLockRefusedInAvailableMode(t *testing.T) {
	c := newTestCluster(t)
	cfg := c.config("n1", 1)
	cfg.Consistency = Available
	c.start(cfg)
	c.waitLeader("n1", 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl := dialAgent(t, c.agents["n1"])
	_, err := cl.Lock(ctx, "db")
	if !errors.Is(err, rpc.ErrInvalidArgument) || !strings.Contains(err.Error(), "quorum") {
		t.Fatalf("lock in available mode: %v, want invalid_argument naming the quorum", err)
	}
	if _, err := cl.Locks(ctx); !errors.Is(err, rpc.ErrInvalidArgument) {
		t.Fatalf("locks in available mode: %v", err)
	}
	if _, err := cl.Status(ctx); err != nil {
		t.Fatalf("the agent stopped serving: %v", err)
	}
}
