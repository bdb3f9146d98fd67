//go:build unix

package supervise

import (
	"cmp"
	"context"
	"github.com/tenurehq/tenure/internal/procgroup"
	"github.com/tenurehq/tenure/internal/testlog"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tenurehq/tenure/rpc"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds every wait in the tests; reaching it is a failure.
const testTimeout = 10 * time.Second

// fakeAgent is an rpc.Backend whose leadership the test flips. It is node
// n1, ID 1.
type fakeAgent struct {
	mu     sync.Mutex
	st     rpc.Status
	subs   map[chan rpc.Event]struct{}
	hang   chan struct{} // when set, Status waits for it to close (or ctx)
	polled atomic.Int64  // Status calls answered

	graces  []time.Duration    // of every runner registration
	reports chan stoppedReport // every runner's stopped reports, in order
	// onReport, when set, is called with each report as it arrives.
	onReport func(epoch uint64)
}

// stoppedReport is a runner's stopped report, as the fake agent got it.
type stoppedReport struct {
	epoch uint64
	at    time.Time
}

func newFakeAgent() *fakeAgent {
	return &fakeAgent{
		st:      rpc.Status{Node: "n1", ID: 1, State: "follower", Consistency: "available", Members: 2},
		subs:    make(map[chan rpc.Event]struct{}),
		reports: make(chan stoppedReport, 64),
	}
}

// WatchRunner subscribes as Watch does and records the runner's grace and
// reports.
func (f *fakeAgent) WatchRunner(ctx context.Context, reg rpc.RunnerRegistration) (rpc.RunnerSubscription, error) {
	events, cancel, err := f.Watch(ctx)
	f.mu.Lock()
	f.graces = append(f.graces, reg.Grace)
	on := f.onReport
	f.mu.Unlock()
	stopped := func(epoch uint64) {
		if on != nil {
			on(epoch)
		}
		select {
		case f.reports <- stoppedReport{epoch: epoch, at: time.Now()}:
		default:
			panic("fake agent: reports buffer full")
		}
	}
	return rpc.RunnerSubscription{Events: events, Stopped: stopped, Cancel: cancel}, err
}

func (f *fakeAgent) Status(ctx context.Context) (rpc.Status, error) {
	f.mu.Lock()
	st, hang := f.st, f.hang
	f.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return rpc.Status{}, ctx.Err()
		}
	}
	f.polled.Add(1)
	return st, nil
}

func (f *fakeAgent) Leader(context.Context) (rpc.LeaderInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.st.Leader == nil {
		return rpc.LeaderInfo{}, rpc.ErrNoLeader
	}
	return *f.st.Leader, nil
}

func (f *fakeAgent) Members(context.Context) ([]rpc.Member, error) { return []rpc.Member{}, nil }

func (f *fakeAgent) Resign(context.Context, rpc.ResignRequest) error { return rpc.ErrNotLeader }
func (f *fakeAgent) Drain(context.Context, rpc.DrainRequest) error   { return nil }
func (f *fakeAgent) Transfer(context.Context, string) error          { return rpc.ErrNoLeader }
func (f *fakeAgent) Lock(context.Context, rpc.LockRequest) (rpc.LockSession, error) {
	return rpc.LockSession{}, rpc.ErrInvalidArgument
}
func (f *fakeAgent) Locks(context.Context) ([]rpc.LockInfo, error) { return nil, rpc.ErrNoLeader }

func (f *fakeAgent) Check(context.Context, uint64) (rpc.CheckResult, error) {
	return rpc.CheckResult{}, nil
}

func (f *fakeAgent) ForceLeave(context.Context, string) error { return rpc.ErrNotLeader }

func (f *fakeAgent) Keys(context.Context, rpc.KeysRequest) (rpc.KeyringInfo, error) {
	return rpc.KeyringInfo{}, rpc.ErrBadRequest
}

// Watch sends the current leader first, as the agent does, then whatever
// the test publishes.
func (f *fakeAgent) Watch(context.Context) (<-chan rpc.Event, func(), error) {
	ch := make(chan rpc.Event, 64)
	f.mu.Lock()
	first := rpc.Event{Event: rpc.EventLeaderChanged, Leader: f.st.Leader, Node: "n1"}
	if f.st.Leader == nil {
		first.Event = rpc.EventNoLeader
	}
	ch <- first
	f.subs[ch] = struct{}{}
	f.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			f.mu.Lock()
			delete(f.subs, ch)
			close(ch)
			f.mu.Unlock()
		})
	}, nil
}

// change edits the status and then publishes events, as the agent does.
func (f *fakeAgent) change(edit func(st *rpc.Status), events ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.st.Leader
	edit(&f.st)
	for _, name := range events {
		ev := rpc.Event{Event: name, Leader: f.st.Leader, Node: "n1"}
		if name == rpc.EventLostLeadership {
			ev.Leader = old
		}
		for ch := range f.subs {
			select {
			case ch <- ev:
			default:
				panic("fake agent: subscriber buffer full")
			}
		}
	}
}

// lead makes n1 the leader of epoch, with lease remaining (0: none).
func (f *fakeAgent) lead(epoch uint64, lease time.Duration) {
	events := []string{rpc.EventLeaderChanged, rpc.EventBecameLeader}
	f.mu.Lock()
	if f.st.IsLeader {
		events = append([]string{rpc.EventLostLeadership}, events...)
	}
	f.mu.Unlock()
	f.change(func(st *rpc.Status) {
		st.IsLeader, st.State, st.Epoch, st.LeaseRemainingMS = true, "leader", epoch, lease.Milliseconds()
		st.Leader = &rpc.LeaderInfo{Node: "n1", ID: 1, Epoch: epoch}
	}, events...)
}

// follow makes n2 the leader of epoch; n1 loses leadership.
func (f *fakeAgent) follow(epoch uint64) {
	f.change(func(st *rpc.Status) {
		st.IsLeader, st.State, st.Epoch, st.LeaseRemainingMS = false, "follower", epoch, 0
		st.Leader = &rpc.LeaderInfo{Node: "n2", ID: 2, Epoch: epoch}
	}, rpc.EventLostLeadership, rpc.EventLeaderChanged)
}

// setLease changes the lease remaining without any event.
func (f *fakeAgent) setLease(consistency string, lease time.Duration) {
	f.change(func(st *rpc.Status) { st.Consistency, st.LeaseRemainingMS = consistency, lease.Milliseconds() })
}

// setHang makes Status calls hang (true) or answer again (false).
func (f *fakeAgent) setHang(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case on && f.hang == nil:
		f.hang = make(chan struct{})
	case !on && f.hang != nil:
		close(f.hang)
		f.hang = nil
	}
}

// waitPolls waits until n more Status calls have been answered.
func (f *fakeAgent) waitPolls(t *testing.T, n int64) {
	t.Helper()
	target := f.polled.Load() + n
	eventually(t, "status polls", func() bool { return f.polled.Load() >= target })
}

// serve starts an rpc server for f at path; it is closed when the test
// ends, if the test did not close it.
func serve(t *testing.T, f *fakeAgent, path string) *rpc.Server {
	t.Helper()
	srv, err := rpc.Listen(rpc.ServerConfig{Path: path, Backend: f, Logger: testLogger(t, "rpc")})
	if err != nil {
		t.Fatalf("rpc.Listen: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// eventually polls cond until it holds, failing after testTimeout.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func testLogger(t testing.TB, name string) *slog.Logger { return testlog.New(t, name+": ") }

// harness runs Run against a fake agent.
type harness struct {
	t      *testing.T
	dir    string
	socket string
	agent  *fakeAgent
	srv    *rpc.Server
	out    *testlog.Buffer
	cancel context.CancelFunc
	result chan result
}

type result struct {
	code int
	err  error
}

// newHarness serves a fake agent in a fresh directory ($OUT for the
// command).
func newHarness(t *testing.T) *harness {
	dir := t.TempDir()
	h := &harness{t: t, dir: dir, socket: filepath.Join(dir, "tenure.sock"), agent: newFakeAgent(), out: &testlog.Buffer{}}
	h.srv = serve(t, h.agent, h.socket)
	return h
}

// run starts Run with cfg (Socket, Env, Logger and output filled in) and
// stops it when the test ends.
func (h *harness) run(cfg Config) {
	cfg.Socket = h.socket
	cfg.Env = append(os.Environ(), "OUT="+h.dir)
	cfg.Logger = testLogger(h.t, "supervise")
	cfg.Stdout, cfg.Stderr = h.out, h.out
	cfg.RetryInterval = cmp.Or(cfg.RetryInterval, 20*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.result = cancel, make(chan result, 1)
	go func() {
		code, err := Run(ctx, cfg)
		h.result <- result{code, err}
	}()
	h.t.Cleanup(func() {
		cancel()
		h.wait()
	})
}

// wait returns Run's result, failing after testTimeout.
func (h *harness) wait() result {
	h.t.Helper()
	select {
	case r := <-h.result:
		h.result <- r // for the next caller
		return r
	case <-time.After(testTimeout):
		h.t.Fatal("Run did not return")
	}
	return result{}
}

func (h *harness) path(name string) string { return filepath.Join(h.dir, name) }

// readFile returns a file of the directory ("" when missing).
func (h *harness) readFile(name string) string {
	b, _ := os.ReadFile(h.path(name))
	return string(b)
}

// remove deletes files of the directory.
func (h *harness) remove(names ...string) {
	h.t.Helper()
	for _, name := range names {
		if err := os.Remove(h.path(name)); err != nil {
			h.t.Fatal(err)
		}
	}
}

// waitFile waits until a file of the directory is not empty, and returns
// its content.
func (h *harness) waitFile(name string) string {
	h.t.Helper()
	var s string
	eventually(h.t, "file "+name, func() bool {
		s = h.readFile(name)
		return s != ""
	})
	return s
}

// waitPID reads a PID the command wrote.
func (h *harness) waitPID(name string) int {
	h.t.Helper()
	var pid int
	eventually(h.t, "pid in "+name, func() bool {
		var err error
		pid, err = strconv.Atoi(strings.TrimSpace(h.readFile(name)))
		return err == nil
	})
	return pid
}

// processGone reports whether pid has exited: no such process, or a zombie
// waiting for a reaper that is not this test.
func processGone(pid int) bool { return procgroup.Gone(pid) }

// waitGone waits until every pid has exited, failing after within.
func waitGone(t *testing.T, within time.Duration, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, pid := range pids {
		for !processGone(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still runs after %v", pid, within)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}
