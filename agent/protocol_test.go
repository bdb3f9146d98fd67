package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/wire"
	"github.com/tenurehq/tenure/rpc"
)

// The rules of docs/PROTOCOL.md that need a real agent behind the socket;
// rpc/conformance_test.go covers the rest against a fake backend.

// TestProtocolNoLeaderCarriesReason: every no_leader answer to leader
// carries the reason status gives (section 6.2): on an agent still waiting
// for its bootstrap, and on a leader whose voters are gone (no quorum).
func TestProtocolNoLeaderCarriesReason(t *testing.T) {
	c := newTestCluster(t)
	c.startN(3)
	c.waitLeader("n3", 15*time.Second)
	c.halt("n1")
	c.halt("n2")
	eventually(t, 15*time.Second, func() error {
		msg, reason, err := noLeaderAndReason(c.agents["n3"].SocketPath())
		switch {
		case err != nil:
			return err
		case !strings.HasPrefix(msg, "no quorum"):
			return fmt.Errorf("no_leader message %q, want the no-quorum reason", msg)
		case msg != reason:
			return fmt.Errorf("no_leader message %q, status reason %q", msg, reason)
		}
		return nil
	})

	lone := newTestCluster(t)
	lone.expect = 3 // waits for two voters that never come
	lone.start(lone.config("n1", 1))
	eventually(t, 5*time.Second, func() error {
		msg, reason, err := noLeaderAndReason(lone.agents["n1"].SocketPath())
		if err == nil && (msg == "" || msg != reason) {
			err = fmt.Errorf("no_leader message %q, status reason %q", msg, reason)
		}
		return err
	})
}

// noLeaderAndReason asks for the leader, which must be unknown, and then
// for the status: the no_leader message and the status reason.
func noLeaderAndReason(path string) (msg, reason string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, path)
	if err != nil {
		return "", "", err
	}
	defer cl.Close()
	_, err = cl.Leader(ctx)
	var e *rpc.Error
	if !errors.As(err, &e) || !errors.Is(err, rpc.ErrNoLeader) {
		return "", "", fmt.Errorf("leader = %v, want no_leader", err)
	}
	st, err := cl.Status(ctx)
	return e.Message, st.Reason, err
}

// TestProtocolQuorumNeedOnEveryNode: quorum.need is the majority of the
// roster on the leader and on the followers, which run no lease round
// (section 6.1).
func TestProtocolQuorumNeedOnEveryNode(t *testing.T) {
	c := newTestCluster(t)
	c.startN(3)
	c.waitLeader("n3", 15*time.Second)
	for name, a := range c.agents {
		st, err := socketStatus(a.SocketPath())
		if err != nil {
			t.Fatal(err)
		}
		if st.Quorum == nil || st.Quorum.Need != 2 || st.Roster == nil || len(st.Roster.Voters) != 3 {
			t.Errorf("%s (%s): quorum %+v, roster %+v; want need 2 of 3 voters", name, st.State, st.Quorum, st.Roster)
		}
		if name != "n3" && st.Quorum != nil && st.Quorum.Have != 0 {
			t.Errorf("follower %s counts %d grants of a round it never ran", name, st.Quorum.Have)
		}
	}
}

// TestProtocolWatchEventsTellTheTruth: a watch's first event carries the
// time of the leadership event that made the state it reports, not the
// watch's start; a lost-leadership event names the node that lost it as
// its node, the ended term as its epoch, and never that node as the
// leader after the event (section 6.8).
func TestProtocolWatchEventsTellTheTruth(t *testing.T) {
	c := newTestCluster(t)
	c.startN(3)
	early := watchT(t, c.agents["n3"].SocketPath())
	epoch := c.waitLeader("n3", 15*time.Second)
	became := lastLeadership(t, early, 200*time.Millisecond)
	if became.Leader == nil || became.Leader.Node != "n3" || became.Epoch != epoch {
		t.Fatalf("n3's last leadership event = %+v, want n3 leading epoch %d", became, epoch)
	}

	late := watchT(t, c.agents["n3"].SocketPath())
	follower := watchT(t, c.agents["n1"].SocketPath())
	first := next(t, late)
	if first.Event != rpc.EventLeaderChanged || first.Time != became.Time || first.Epoch != epoch {
		t.Fatalf("a later watch's first event = %+v, want leader-changed at %s (epoch %d), when it happened",
			first, became.Time, epoch)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, c.agents["n3"].SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	lost := next(t, late)
	for lost.Event != rpc.EventLostLeadership {
		lost = next(t, late)
	}
	if lost.Node != "n3" || lost.Epoch != epoch || (lost.Leader != nil && lost.Leader.Node == "n3") {
		t.Fatalf("lost-leadership = %+v (leader %+v); want node n3, epoch %d, and a leader after it that is not n3",
			lost, lost.Leader, epoch)
	}
	// A follower's no-leader event says which leader it forgot and why;
	// its watch's first event does not.
	ev := next(t, follower)
	if ev.Event != rpc.EventLeaderChanged || ev.Forgot != "" {
		t.Fatalf("n1's first event = %+v, want leader-changed without forgot", ev)
	}
	for ev.Event != rpc.EventNoLeader {
		ev = next(t, follower)
	}
	if ev.Forgot != "n3: it resigned" || ev.Node != "n1" {
		t.Fatalf("n1's no-leader event = %+v, want forgot %q", ev, "n3: it resigned")
	}
}

func watchT(t *testing.T, path string) *rpc.Watcher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	w, err := cl.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// next returns the watch's next event, failing the test after 10 s.
func next(t *testing.T, w *rpc.Watcher) rpc.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	return ev
}

// lastLeadership reads w's events until none came for quiet, and returns
// the last leadership event among them.
func lastLeadership(t *testing.T, w *rpc.Watcher, quiet time.Duration) rpc.Event {
	t.Helper()
	var last rpc.Event
	for {
		ctx, cancel := context.WithTimeout(context.Background(), quiet)
		ev, err := w.Next(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			return last
		}
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		if ev.Member == nil {
			last = ev
		}
	}
}

// TestSocketMaxFrameConfig: --socket-max-frame is bounded, and the agent
// announces the limit it was given in every handshake.
func TestSocketMaxFrameConfig(t *testing.T) {
	for _, bad := range []int{-1, rpc.MinMaxFrame - 1, rpc.MaxMaxFrame + 1} {
		cfg := DefaultConfig()
		cfg.SocketMaxFrame = bad
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "socket-max-frame") {
			t.Errorf("SocketMaxFrame %d: Validate = %v", bad, err)
		}
	}
	c := newTestCluster(t)
	cfg := c.config("n1", 1)
	cfg.SocketMaxFrame = 1 << 20
	c.start(cfg)
	got := helloMaxFrame(t, cfg.SocketPath)
	if got != 1<<20 {
		t.Fatalf("the agent announces max_frame %d, want %d", got, 1<<20)
	}
}

// helloMaxFrame says hello on the socket at path, in raw bytes, and
// returns the max_frame of the reply.
func helloMaxFrame(t *testing.T, path string) uint64 {
	t.Helper()
	nc, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	hello := []byte{0x81, 0xa7, 'v', 'e', 'r', 's', 'i', 'o', 'n', 0x01} // {"version": 1}
	if err := wire.WriteFrame(nc, hello); err != nil {
		t.Fatal(err)
	}
	b, err := wire.ReadFrame(nc, wire.DefaultMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	var reply rpc.HelloReply
	if err := wire.Unmarshal(b, &reply); err != nil || reply.Error != nil {
		t.Fatalf("hello reply %+v, %v", reply, err)
	}
	return reply.MaxFrame
}
