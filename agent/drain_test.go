package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// The tests below run three real agents with a `tenure run` supervisor on
// each (handOver), move leadership off the leader n3 by an operator's
// request over the local socket, and check that the command moved exactly
// once, to the expected node, and was not moved back after the old
// leader's resign hold and the stabilisation delay after which a higher
// node preempts.

// TestDrainMovesRunOnce: draining the leader moves its command once, to
// the next node; the drained node reports itself drained, and the others
// list it so.
func TestDrainMovesRunOnce(t *testing.T) {
	h := newHandOver(t, politeChild, time.Second)
	h.move(func() error {
		return socketCall(h.c.agents["n3"], func(ctx context.Context, cl *rpc.Client) error { return cl.Drain(ctx, true) })
	})
	h.checkMovedOnce("n2")
	st, err := socketStatus(h.c.agents["n3"].SocketPath())
	if err != nil || !st.Drained || st.IsLeader {
		t.Fatalf("n3's status after its drain: %+v, %v", st, err)
	}
	waitMember(t, h.c.agents["n1"], "n3", func(m rpc.Member) bool { return m.Drained && !m.Eligible })
}

// TestTransferMovesRunOnceToNamedNode: a transfer to n1, asked of n2 (which
// forwards it to the leader), moves the command once to n1, though n2
// outranks it; nobody preempts n1's term.
func TestTransferMovesRunOnceToNamedNode(t *testing.T) {
	h := newHandOver(t, politeChild, time.Second)
	h.move(func() error {
		return socketCall(h.c.agents["n2"], func(ctx context.Context, cl *rpc.Client) error { return cl.Transfer(ctx, "n1") })
	})
	h.checkMovedOnce("n1")
}

// TestResignIsNotUndone: after `tenure resign` the command moves once, to
// n2, and stays there: n3 does not take leadership back once its hold
// and the stabilisation delay have passed.
func TestResignIsNotUndone(t *testing.T) {
	h := newHandOver(t, politeChild, time.Second)
	h.move(func() error {
		return socketCall(h.c.agents["n3"], func(ctx context.Context, cl *rpc.Client) error { return cl.Resign(ctx) })
	})
	h.checkMovedOnce("n2")
}

// move asks the leader n3 to go (through f) and records when.
func (h *handOver) move(f func() error) {
	st := h.c.agents["n3"].Status()
	h.deadline = time.Now().Add(time.Duration(st.LeaseRemainingMS) * time.Millisecond)
	h.at = time.Now()
	if err := f(); err != nil {
		h.t.Fatal(err)
	}
}

// settleTime outlasts what could move leadership back: the old leader's
// resign hold, an announce interval for its claim, the stabilisation delay
// and another announce interval, with a margin.
func settleTime() time.Duration {
	e := LocalElection()
	return e.ResignHold + 2*e.AnnounceInterval + e.Stabilization + 3*time.Second
}

// checkMovedOnce waits until to runs the command of a later term, then for
// settleTime, and checks that the commands ran in exactly two terms (n3's,
// then to's), never two at once, and that the hand-over did not wait for
// the old lease to run out.
func (h *handOver) checkMovedOnce(to string) {
	eventually(h.t, 10*time.Second, func() error {
		if _, ok := h.started(to, h.first+1); !ok {
			return fmt.Errorf("no command of a later term on %s yet", to)
		}
		return nil
	})
	time.Sleep(settleTime())
	h.stopRuns()
	var terms []string
	ivs := h.intervals()
	for _, iv := range ivs {
		h.t.Logf("%s epoch %d %-10s %s", iv.node, iv.epoch, iv.role, iv.span(h.at))
		if iv.role == "child" {
			terms = append(terms, fmt.Sprintf("%s@%d", iv.node, iv.epoch))
		}
	}
	// A lease of to's that lapses under load and is won again by to is a
	// later term on the same node, not a move.
	moved := len(terms) >= 2 && terms[0] == fmt.Sprintf("n3@%d", h.first)
	for _, term := range terms[min(1, len(terms)):] {
		moved = moved && strings.HasPrefix(term, to+"@")
	}
	if !moved {
		h.t.Fatalf("commands ran in terms %v; want n3's, then only %s's", terms, to)
	}
	h.checkNoOverlap(ivs)
	if next, _ := h.started(to, h.first+1); !next.Before(h.deadline) {
		h.t.Errorf("the next command started %v after the old lease deadline: the hand-over waited for the promises", next.Sub(h.deadline))
	}
}

// checkNoOverlap fails if processes of two nodes' commands ran at once.
func (h *handOver) checkNoOverlap(ivs []interval) {
	for i, a := range ivs {
		for _, b := range ivs[i+1:] {
			if a.node != b.node && a.start.Before(b.end) && b.start.Before(a.end) {
				h.t.Errorf("%s's %s (epoch %d) and %s's %s (epoch %d) overlapped", a.node, a.role, a.epoch, b.node, b.role, b.epoch)
			}
		}
	}
}

// TestDrainSurvivesRestartAndLifts: a drained agent restarted with the same
// data dir is still drained (its file), says so, and does not lead; the
// others see it ineligible. Lifting the drain makes it eligible again: as
// the highest node it preempts and leads.
func TestDrainSurvivesRestartAndLifts(t *testing.T) {
	c := newTestCluster(t)
	c.startN(3)
	first := c.waitLeader("n3", 20*time.Second)
	drain := func(on bool) error {
		return socketCall(c.agents["n3"], func(ctx context.Context, cl *rpc.Client) error { return cl.Drain(ctx, on) })
	}
	if err := drain(true); err != nil {
		t.Fatal(err)
	}
	second := c.waitLeader("n2", 10*time.Second)
	if _, err := os.Stat(filepath.Join(c.dir, "n3", drainedFile)); err != nil {
		t.Fatalf("no drained file: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.agents["n3"].Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	delete(c.agents, "n3")
	c.start(c.config("n3", 3))
	led := watchBecameLeader(t, c.agents["n3"])
	waitMember(t, c.agents["n1"], "n3", func(m rpc.Member) bool { return m.Status == rpc.MemberAlive && m.Drained && !m.Eligible })
	time.Sleep(settleTime())
	c.waitLeader("n2", 5*time.Second)
	if n := led.Load(); n != 0 {
		t.Fatalf("n3 became leader %d times while drained", n)
	}
	if st, err := socketStatus(c.agents["n3"].SocketPath()); err != nil || !st.Drained {
		t.Fatalf("restarted n3's status: %+v, %v", st, err)
	}
	if err := drain(false); err != nil {
		t.Fatal(err)
	}
	e := LocalElection()
	third := c.waitLeader("n3", e.StartupDelay+2*e.AnnounceInterval+e.Stabilization+5*time.Second)
	if third <= second || second <= first || led.Load() == 0 {
		t.Fatalf("epochs %d, %d, %d: want them to grow", first, second, third)
	}
	if _, err := os.Stat(filepath.Join(c.dir, "n3", drainedFile)); !os.IsNotExist(err) {
		t.Fatalf("drained file after drain --off: %v", err)
	}
	waitMember(t, c.agents["n1"], "n3", func(m rpc.Member) bool { return !m.Drained && m.Eligible })
}

// socketCall runs f with a client of a's socket.
func socketCall(a *Agent, f func(context.Context, *rpc.Client) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, a.SocketPath())
	if err != nil {
		return err
	}
	defer cl.Close()
	return f(ctx, cl)
}

// waitMember waits until a's member list shows name as ok says.
func waitMember(t *testing.T, a *Agent, name string, ok func(rpc.Member) bool) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		var ms []rpc.Member
		err := socketCall(a, func(ctx context.Context, cl *rpc.Client) (err error) {
			ms, err = cl.Members(ctx)
			return err
		})
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m.Name == name && ok(m) {
				return nil
			}
		}
		return fmt.Errorf("%s as %s lists it: %+v", name, a.Name(), ms)
	})
}

// watchBecameLeader counts the became-leader events a's watch stream
// reports, until the test ends.
func watchBecameLeader(t *testing.T, a *Agent) *atomic.Int64 {
	var n atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	cl, err := rpc.Dial(ctx, a.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	w, err := cl.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := w.Next(ctx)
			if err != nil {
				return
			}
			if ev.Event == rpc.EventBecameLeader {
				n.Add(1)
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		w.Close()
		cl.Close()
		<-done
	})
	return &n
}

// TestTransferViaSilentLeaderSaysWhy: a transfer asked of a follower whose
// leader does not answer (frozen, as a stopped VM) is refused as no_leader
// with the leader's name and the error, not as an internal failure of the
// agent that was asked: the operator learns why and can retry.
func TestTransferViaSilentLeaderSaysWhy(t *testing.T) {
	c := newTestCluster(t)
	c.startN(3)
	c.waitLeader("n3", 20*time.Second)
	resume := c.agents["n3"].Freeze()
	defer resume()
	err := socketCall(c.agents["n1"], func(ctx context.Context, cl *rpc.Client) error { return cl.Transfer(ctx, "n2") })
	if !errors.Is(err, rpc.ErrNoLeader) || !strings.Contains(err.Error(), "n3") || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("transfer through n1 while n3 is frozen: %v; want no_leader naming n3", err)
	}
}

// TestTransferToFrozenNodeKeepsTheTerm: a transfer to a member that gossip
// lists alive but whose agent does not answer (frozen, as a stopped VM) is
// refused by the leader, asked directly or through a follower, and the
// leader keeps its term: no window without a leader, no move to a node
// the operator did not name. Before, the leader resigned naming it, and
// the election handed the term to another node after the transfer window.
func TestTransferToFrozenNodeKeepsTheTerm(t *testing.T) {
	c, epoch := startWithFrozenN2(t)
	for _, asked := range []string{"n3", "n1"} {
		err := socketCall(c.agents[asked], func(ctx context.Context, cl *rpc.Client) error { return cl.Transfer(ctx, "n2") })
		if !errors.Is(err, rpc.ErrInvalidArgument) || !strings.Contains(err.Error(), `"n2" did not answer the leader`) {
			t.Fatalf("transfer to frozen n2 asked on %s: %v; want invalid_argument saying n2 did not answer", asked, err)
		}
	}
	if got, err := agreedAmong("n3", c.agents["n1"], c.agents["n3"]); err != nil || got != epoch {
		t.Fatalf("after the refused transfers: %v, epoch %d; want n3 still, epoch %d", err, got, epoch)
	}
}

// startWithFrozenN2 starts three agents, waits until n3 leads, and
// freezes n2 (the node below it) until the test ends. It returns n3's
// epoch.
func startWithFrozenN2(t *testing.T) (*testCluster, uint64) {
	c := newTestCluster(t)
	c.startN(3)
	epoch := c.waitLeader("n3", 20*time.Second)
	t.Cleanup(c.agents["n2"].Freeze())
	return c, epoch
}

// TestResignPassesOverFrozenSuccessor: the node a resign of n3 would name
// (n2, the highest after it) is frozen; the leader finds that n2 does not
// answer and names n1, which takes over without an ELECTION. Before, the
// RESIGN named n2, and n1 waited out the transfer window, then sent frozen
// n2 an ELECTION and waited for its answer. n3 does not take the term back.
func TestResignPassesOverFrozenSuccessor(t *testing.T) {
	c, first := startWithFrozenN2(t)
	elections := c.agents["n1"].Counters()["send.election"]
	if err := socketCall(c.agents["n3"], func(ctx context.Context, cl *rpc.Client) error { return cl.Resign(ctx) }); err != nil {
		t.Fatal(err)
	}
	var next uint64
	eventually(t, 10*time.Second, func() error {
		var err error
		next, err = agreedAmong("n1", c.agents["n1"], c.agents["n3"])
		return err
	})
	if next <= first {
		t.Fatalf("n1 leads epoch %d after n3's term %d", next, first)
	}
	if got := c.agents["n1"].Counters()["send.election"]; got != elections {
		t.Fatalf("n1 sent %d ELECTIONs to take over; want none (the RESIGN names it)", got-elections)
	}
	if got := c.agents["n3"].Counters()["resign.passed_over"]; got != 1 {
		t.Fatalf("n3 passed over %d natural successors, want 1 (n2)", got)
	}
	time.Sleep(settleTime())
	if got, err := agreedAmong("n1", c.agents["n1"], c.agents["n3"]); err != nil || got != next {
		t.Fatalf("after the resign hold: %v, epoch %d; want n1 still leading epoch %d", err, got, next)
	}
}

// TestCanTakeChecksTheVotersInTime: a node asked whether it can take the
// term asks the voters first, and answers no, naming the silent ones,
// when too few of them answer. It ends its check within half of what the
// asking leader says it waits, when that is shorter than half its own
// peer wait: here the leader waits just that half of n1's peer wait, and
// gets n1's reason rather than a timeout. n2 and n3 are frozen: n1 alone
// cannot make a majority of the three voters.
func TestCanTakeChecksTheVotersInTime(t *testing.T) {
	c := newTestCluster(t)
	c.ttl = 10 * time.Second // a peer wait long enough to halve with room
	c.startN(3)
	c.waitLeader("n3", 20*time.Second)
	var wait time.Duration
	if err := c.agents["n1"].do(context.Background(), func() {
		wait = c.agents["n1"].core.peerWait(c.agents["n1"].cfg.Clock.Now()) / 2
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.agents["n2"].Freeze())
	t.Cleanup(c.agents["n3"].Freeze())
	err := c.agents["n3"].askCanTake(context.Background(), c.agents["n1"].self(), wait)
	var refused *cannotTake
	if !errors.As(err, &refused) {
		t.Fatalf("n1 asked by n3 with n2 and n3 frozen: %v; want its refusal within the %v n3 waits", err, wait)
	}
	t.Logf("n1's answer: %s", refused.why)
	for _, want := range []string{"cannot reach a majority of the voters", "n2 (", "n3 ("} {
		if !strings.Contains(refused.why, want) {
			t.Errorf("n1's refusal %q does not say %q", refused.why, want)
		}
	}
}
