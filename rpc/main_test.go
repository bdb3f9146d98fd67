package rpc

import (
	"context"
	"errors"
	"fmt"
	"github.com/tenurehq/tenure/internal/testlog"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tenurehq/tenure/internal/wire"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(probeEnv); path != "" {
		os.Exit(probe(path)) // a child started by TestSocketPermissions
	}
	goleak.VerifyTestMain(m)
}

// probeEnv makes the test binary, started as a child, dial the socket at
// its value and exit 0 when a status call works, 3 otherwise.
const probeEnv = "TENURE_RPC_PROBE"

func probe(path string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, path)
	if err != nil {
		return 3
	}
	defer c.Close()
	if _, err := c.Status(ctx); err != nil {
		return 3
	}
	return 0
}

// testTimeout bounds every wait in the tests; reaching it is a failure.
const testTimeout = 10 * time.Second

// fakeBackend is a Backend whose answers the test sets.
type fakeBackend struct {
	mu         sync.Mutex
	status     Status
	leader     *LeaderInfo
	members    []Member
	resignErr  error
	resignHold uint64 // the hold of the last resign request
	membErr    error
	block      chan struct{} // when set, Status waits for it to close (or ctx)
	flood      func(n int) Event

	entered chan struct{} // a blocked Status call has started
	subs    chan *fakeSub // every Watch subscription, for the test to drive
	runners chan *fakeRunner
	// maxGrace, when set, makes WatchRunner refuse a longer grace.
	maxGrace time.Duration
}

func newFakeBackend() *fakeBackend {
	l := &LeaderInfo{Node: "n3", ID: 3, Epoch: 7}
	return &fakeBackend{
		status: Status{Node: "n1", ID: 1, Leader: l, Epoch: 7, Members: 3, State: "follower", Consistency: "quorum"},
		leader: l,
		members: []Member{
			{Name: "n1", ID: 1, Addr: "10.0.0.1:7946", PeerAddr: "10.0.0.1:7947", Status: MemberAlive, Voter: true, Eligible: true},
			{Name: "n3", ID: 3, Addr: "10.0.0.3:7946", PeerAddr: "10.0.0.3:7947", Status: MemberAlive, Voter: true, Eligible: true, IsLeader: true},
		},
		entered: make(chan struct{}, 16),
		subs:    make(chan *fakeSub, 16),
		runners: make(chan *fakeRunner, 16),
	}
}

func (f *fakeBackend) Status(ctx context.Context) (Status, error) {
	f.mu.Lock()
	st, block := f.status, f.block
	f.mu.Unlock()
	if block != nil {
		f.entered <- struct{}{}
		select {
		case <-block:
		case <-ctx.Done():
			return Status{}, ctx.Err()
		}
	}
	return st, nil
}

func (f *fakeBackend) Leader(context.Context) (LeaderInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leader == nil {
		return LeaderInfo{}, errNoQuorum
	}
	return *f.leader, nil
}

var errNoQuorum = fmt.Errorf("no leader elected yet: %w", ErrNoLeader) // a reason the agent gives

func (f *fakeBackend) Members(context.Context) ([]Member, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.members, f.membErr
}

func (f *fakeBackend) Resign(_ context.Context, req ResignRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resignHold = req.HoldMS
	return f.resignErr
}

func (f *fakeBackend) Drain(_ context.Context, req DrainRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status.Drained = !req.Off
	return nil
}

func (f *fakeBackend) Lock(context.Context, LockRequest) (LockSession, error) {
	return LockSession{}, fmt.Errorf("%w: the fake has no locks", ErrInvalidArgument)
}

func (f *fakeBackend) Locks(context.Context) ([]LockInfo, error) { return nil, ErrNoLeader }

func (f *fakeBackend) Transfer(_ context.Context, name string) error {
	if name != "n2" {
		return fmt.Errorf("agent: transfer: %w: %q", ErrNotFound, name)
	}
	return nil
}

func (f *fakeBackend) Check(_ context.Context, epoch uint64) (CheckResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	leads := f.status.IsLeader && f.status.Leader != nil
	return CheckResult{Current: leads && f.status.Leader.Epoch == epoch, IsLeader: leads, Epoch: f.status.Epoch}, nil
}

func (f *fakeBackend) ForceLeave(_ context.Context, name string) error {
	if name != "gone" {
		return fmt.Errorf("agent: force-leave: %w: %q", ErrNotFound, name)
	}
	return nil
}

func (f *fakeBackend) Keys(_ context.Context, req KeysRequest) (KeyringInfo, error) {
	return KeyringInfo{Keys: map[string]int{"k": 1}, NumNodes: 1, NumResp: 1}, nil
}

func (f *fakeBackend) set(fn func(f *fakeBackend)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// Watch sends the current leader first, then whatever the test pushes.
func (f *fakeBackend) Watch(context.Context) (<-chan Event, func(), error) {
	f.mu.Lock()
	flood := f.flood
	first := Event{Time: "2025-01-02T03:04:05.000000006Z", Event: EventLeaderChanged, Leader: f.leader, Node: "n1"}
	f.mu.Unlock()
	s := &fakeSub{in: make(chan Event, 1024), out: make(chan Event), cancelled: make(chan struct{}),
		stopped: make(chan struct{}), exited: make(chan struct{}), flood: flood}
	s.in <- first
	go s.run()
	select {
	case f.subs <- s:
	default: // nobody is looking (the fuzzer)
	}
	return s.out, s.cancel, nil
}

// WatchRunner subscribes as Watch does and records the runner: its grace,
// its peer, and its stopped and running reports.
func (f *fakeBackend) WatchRunner(ctx context.Context, reg RunnerRegistration) (RunnerSubscription, error) {
	f.mu.Lock()
	limit := f.maxGrace
	f.mu.Unlock()
	if limit > 0 && reg.Grace > limit {
		return RunnerSubscription{}, fmt.Errorf("fake: grace %v over %v: %w", reg.Grace, limit, ErrInvalidArgument)
	}
	events, cancel, _ := f.Watch(ctx)
	r := &fakeRunner{grace: reg.Grace, peer: reg.Peer, stopped: make(chan uint64, 64), running: make(chan [2]uint64, 64)}
	select {
	case f.runners <- r:
	default:
	}
	return RunnerSubscription{Events: events, Stopped: r.report, Running: r.run,
		Cancel: func() { r.cancelled.Store(true); cancel() }}, nil
}

// fakeRunner is one runner registration.
type fakeRunner struct {
	grace     time.Duration
	peer      Peer
	stopped   chan uint64    // the stopped reports, in order
	running   chan [2]uint64 // the running reports: epoch, pgid
	cancelled atomic.Bool
	late      atomic.Bool // a report came after cancel
}

func (r *fakeRunner) run(epoch uint64, pgid int) error {
	select {
	case r.running <- [2]uint64{epoch, uint64(pgid)}:
	default:
	}
	return nil
}

func (r *fakeRunner) report(epoch uint64) {
	if r.cancelled.Load() {
		r.late.Store(true)
	}
	select {
	case r.stopped <- epoch:
	default: // the fuzzer may send many; stopped must not block
	}
}

// fakeSub is one Watch subscription: a goroutine forwards events from in
// (or generated by flood) to out, and closes out when cancelled or stopped.
type fakeSub struct {
	in        chan Event
	out       chan Event
	cancelled chan struct{}
	stopped   chan struct{}
	exited    chan struct{}
	flood     func(n int) Event
	sent      atomic.Int64
	once      sync.Once
	stopOnce  sync.Once
}

func (s *fakeSub) run() {
	defer close(s.exited)
	defer close(s.out)
	for n := 0; ; n++ {
		ev, ok := s.next(n)
		if !ok {
			return
		}
		select {
		case s.out <- ev:
			s.sent.Add(1)
		case <-s.cancelled:
			return
		}
	}
}

// next returns the next event to send: a pushed one, else a generated one
// when flooding, else it waits for a push. false means the subscription ended.
func (s *fakeSub) next(n int) (Event, bool) {
	select {
	case ev := <-s.in:
		return ev, true
	case <-s.cancelled:
		return Event{}, false
	case <-s.stopped:
		return Event{}, false
	default:
	}
	if s.flood != nil {
		return s.flood(n), true
	}
	select {
	case ev := <-s.in:
		return ev, true
	case <-s.cancelled:
		return Event{}, false
	case <-s.stopped:
		return Event{}, false
	}
}

// cancel ends the subscription and waits for its goroutine.
func (s *fakeSub) cancel() {
	s.once.Do(func() { close(s.cancelled) })
	<-s.exited
}

// stop simulates the agent stopping: the channel closes without cancel.
func (s *fakeSub) stop() { s.stopOnce.Do(func() { close(s.stopped) }) }

func (s *fakeSub) push(t *testing.T, ev Event) {
	t.Helper()
	select {
	case s.in <- ev:
	default:
		t.Fatal("fake subscription buffer is full")
	}
}

// recv waits for a value from ch, failing the test after testTimeout.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// eventually polls cond until it holds, failing after testTimeout.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testLogger(t testing.TB) *slog.Logger { return testlog.New(t, "") }

// startServer serves fb on a socket in a fresh directory; edit adjusts the
// config. The server is closed when the test ends.
func startServer(t *testing.T, fb *fakeBackend, edit func(*ServerConfig)) *Server {
	t.Helper()
	cfg := ServerConfig{Path: filepath.Join(t.TempDir(), "tenure.sock"), Backend: fb,
		Logger: testLogger(t), AgentVersion: "test-1.2.3"}
	if edit != nil {
		edit(&cfg)
	}
	srv, err := Listen(cfg)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func dialT(t *testing.T, path string) *Client {
	t.Helper()
	c, err := Dial(testCtx(t), path)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// checkServing fails the test unless a fresh client gets a Status.
func checkServing(t *testing.T, path string) {
	t.Helper()
	c := dialT(t, path)
	if _, err := c.Status(testCtx(t)); err != nil {
		t.Fatalf("fresh client Status: %v", err)
	}
	c.Close()
}

// raw is a hand-driven protocol connection.
type raw struct {
	t  *testing.T
	nc *net.UnixConn
}

func dialRaw(t *testing.T, path string) *raw {
	t.Helper()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(testTimeout))
	return &raw{t: t, nc: nc.(*net.UnixConn)}
}

func (r *raw) send(v any) {
	r.t.Helper()
	b, err := wire.Marshal(v)
	if err != nil {
		r.t.Fatal(err)
	}
	r.sendFrame(b)
}

func (r *raw) sendFrame(body []byte) {
	r.t.Helper()
	if err := wire.WriteFrame(r.nc, body); err != nil {
		r.t.Fatalf("write frame: %v", err)
	}
}

func (r *raw) sendBytes(b []byte) {
	r.t.Helper()
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// hello performs a successful handshake.
func (r *raw) hello() {
	r.t.Helper()
	v := uint64(ProtocolVersion)
	r.send(Hello{Version: &v, Client: "raw-test"})
	var reply HelloReply
	r.read(&reply)
	if reply.Error != nil || reply.Version != ProtocolVersion || reply.Agent != "test-1.2.3" {
		r.t.Fatalf("hello reply = %+v", reply)
	}
}

func (r *raw) read(v any) {
	r.t.Helper()
	b, err := wire.ReadFrame(r.nc, wire.DefaultMaxFrame)
	if err != nil {
		r.t.Fatalf("read frame: %v", err)
	}
	if err := wire.Unmarshal(b, v); err != nil {
		r.t.Fatalf("decode frame: %v", err)
	}
}

// expectError reads a frame (HelloReply or Response) and checks its error
// code; it returns the frame as a Response.
func (r *raw) expectError(code string) Response {
	r.t.Helper()
	var resp Response
	r.read(&resp)
	if resp.Error == nil || resp.Error.Code != code {
		r.t.Fatalf("got error %+v, want code %q", resp.Error, code)
	}
	return resp
}

// expectClosed checks that the server closed the connection.
func (r *raw) expectClosed() {
	r.t.Helper()
	b, err := wire.ReadFrame(r.nc, wire.DefaultMaxFrame)
	if err == nil {
		r.t.Fatalf("got a frame of %d bytes, want the connection closed", len(b))
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		r.t.Fatalf("read: %v, want EOF or reset", err)
	}
}
