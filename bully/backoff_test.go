package bully

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestFailedRoundsBackOff: each failed lease round takes an epoch, so a
// node whose rounds keep failing waits longer after each (doubling from
// RetryDelay, up to maxBackoff RetryDelays), and a lower node's ELECTION
// during that wait is answered without starting another round. Before,
// every such ELECTION started a round at once: the churn simulation burned
// 4.4 epochs per term.
func TestFailedRoundsBackOff(t *testing.T) {
	m, cfg, now := newMachine(t, 2, "n2", func(c *Config) { c.Rand = rand.New(rand.NewPCG(1, 2)) })
	lower := Member{Node: Node{ID: 1, Name: "n1"}, Eligible: true}
	m.SetMembers(now, []Member{lower})
	m.Ready()
	epoch, _ := nextRound(t, m, &now, cfg.StartupDelay+time.Minute)
	var waits []time.Duration
	for k := 1; k <= 6; k++ {
		m.AcquireFailed(now, epoch, 0, 0)
		// A lower node campaigns now: it gets an answer, but no new round
		// starts before the backoff is over.
		reply := m.Step(now, Message{Type: MsgElection, From: lower.Node, To: cfg.Self.Node, Epoch: epoch})
		if reply == nil || reply.Type != MsgAnswer {
			t.Fatalf("failure %d: the lower node's ELECTION got %v, want an ANSWER", k, reply)
		}
		if e := m.Ready().Acquire; e != 0 {
			t.Fatalf("failure %d: a lower node's ELECTION started round %d during the backoff", k, e)
		}
		var wait time.Duration
		epoch, wait = nextRound(t, m, &now, time.Minute)
		waits = append(waits, wait)
		// Each wait is RetryDelay doubled per failure after the first,
		// capped, of which the upper half is random.
		floor := cfg.RetryDelay << min(k-1, 3) / 2
		if cap := maxBackoff * cfg.RetryDelay / 2; floor > cap {
			floor = cap
		}
		if wait < floor || wait > 2*floor+20*time.Millisecond {
			t.Fatalf("failure %d: retried after %v, want between %v and %v (waits %v)", k, wait, floor, 2*floor, waits)
		}
	}
	t.Logf("retry waits after 1..6 failures in a row: %v", waits)
}

// nextRound ticks m every 10 ms from *now until it asks for a lease round,
// and returns the round's epoch and how long that took; it fails the test
// after limit.
func nextRound(t *testing.T, m *Machine, now *time.Time, limit time.Duration) (uint64, time.Duration) {
	t.Helper()
	start := *now
	for ; now.Sub(start) < limit; *now = now.Add(10 * time.Millisecond) {
		m.Tick(*now)
		if e := m.Ready().Acquire; e != 0 {
			return e, now.Sub(start)
		}
	}
	t.Fatalf("no lease round within %v", limit)
	return 0, 0
}

// TestCollidedRoundRetriesWithoutBackoff: a round that lost only to lower
// candidates' rounds retries once they can have ended plus jitter, for two
// failures in a row; a third backs off as any failed round does.
func TestCollidedRoundRetriesWithoutBackoff(t *testing.T) {
	m, cfg, now := newMachine(t, 9, "n9", func(c *Config) { c.Rand = rand.New(rand.NewPCG(3, 4)) })
	m.Ready()
	epoch, _ := nextRound(t, m, &now, cfg.StartupDelay+time.Minute)
	const wait = 700 * time.Millisecond // until the lower rounds can have ended
	for k := 1; k <= maxCollidedRetries; k++ {
		m.AcquireCollided(now, epoch, epoch, wait)
		var took time.Duration
		epoch, took = nextRound(t, m, &now, time.Minute)
		if took < wait || took > wait+cfg.Jitter+10*time.Millisecond {
			t.Fatalf("collision %d: retried after %v, want %v plus at most %v of jitter", k, took, wait, cfg.Jitter)
		}
	}
	m.AcquireCollided(now, epoch, epoch, wait)
	if _, took := nextRound(t, m, &now, time.Minute); took < wait+cfg.RetryDelay {
		t.Fatalf("collision %d in a row: retried after %v, want the backoff too (at least %v)", maxCollidedRetries+1, took, wait+cfg.RetryDelay)
	}
}

// TestLeaderWhoseNewTermFailsCampaigns: a leader that learns of a term at
// least as high as its own from a lower node starts a term above it; when
// that round fails it knows no leader and campaigns again. Before, it was
// left a follower of itself, which never campaigns (the random schedules
// found a cluster stuck without a leader that way).
func TestLeaderWhoseNewTermFailsCampaigns(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Self = Member{Node: Node{ID: 3, Name: "n3"}, Eligible: true}
	cfg.Rand = rand.New(rand.NewPCG(1, 2))
	now := time.Unix(1000, 0)
	m, err := New(cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	n1 := Member{Node: Node{ID: 1, Name: "n1"}, Eligible: true}
	m.SetMembers(now, []Member{n1})
	var epoch uint64
	for ; epoch == 0; now = now.Add(10 * time.Millisecond) {
		m.Tick(now)
		epoch = m.Ready().Acquire
	}
	m.Acquired(now, epoch)
	m.Ready()
	m.Step(now, Message{Type: MsgInfo, From: n1.Node, To: cfg.Self.Node, Leader: n1.Node, Term: epoch + 1, Epoch: epoch + 1})
	next := m.Ready().Acquire
	if next <= epoch+1 {
		t.Fatalf("the leader started round %d, want one above %d", next, epoch+1)
	}
	m.AcquireFailed(now, next, next, 0)
	if st := m.Status(); st.State != StateFollower || !st.Leader.IsZero() {
		t.Fatalf("after the failed round: %v following %v, want a follower with no leader", st.State, st.Leader)
	}
	for end := now.Add(10 * time.Second); now.Before(end); now = now.Add(10 * time.Millisecond) {
		m.Tick(now)
		if m.Ready().Acquire != 0 {
			return
		}
	}
	t.Fatal("no new campaign within 10 s of the failed round")
}

// TestFailedRoundFollowsPassedLeader: a candidate whose round is in flight
// does not yield to the COORDINATOR of a lower leader; when its round then
// fails (the voters promised that leader), it follows that leader at once,
// and claims leadership from it as a higher node does, instead of knowing
// no leader until the next announcement. Before, the highest node of a
// fleet that started together was often the last to learn the leader,
// a whole AnnounceInterval after the others.
func TestFailedRoundFollowsPassedLeader(t *testing.T) {
	n5 := Member{Node: Node{ID: 5, Name: "n5"}, Eligible: true}
	// passedOver starts n9's round and has n5 announce its term meanwhile.
	passedOver := func() (*Machine, time.Time, uint64) {
		m, cfg, now := newMachine(t, 9, "n9", func(c *Config) { c.Rand = rand.New(rand.NewPCG(5, 6)) })
		m.SetMembers(now, []Member{cfg.Self, n5})
		m.Ready()
		epoch, _ := nextRound(t, m, &now, cfg.StartupDelay+time.Minute)
		m.Step(now, Message{Type: MsgCoordinator, From: n5.Node, To: cfg.Self.Node, Leader: n5.Node, Term: epoch, Epoch: epoch})
		return m, now, epoch
	}

	m, now, epoch := passedOver()
	if st := m.Status(); st.State != StateAcquiring || !st.Leader.IsZero() {
		t.Fatalf("during its round: %v following %v, want acquiring with no leader", st.State, st.Leader)
	}
	m.Ready()
	m.AcquireFailed(now, epoch, epoch, time.Second)
	if st := m.Status(); st.State != StateFollower || st.Leader != n5.Node || st.Term != epoch {
		t.Fatalf("after the failed round: %v following %v term %d, want a follower of n5 term %d", st.State, st.Leader, st.Term, epoch)
	}
	claimed := false
	for _, msg := range m.Ready().Messages {
		claimed = claimed || (msg.Type == MsgAnswer && msg.To == n5.Node)
	}
	if !claimed {
		t.Fatal("the higher node did not claim leadership from the leader it follows")
	}

	// Nor when that leader resigned while the round was in flight.
	m, now, epoch = passedOver()
	m.Step(now, Message{Type: MsgResign, From: n5.Node, To: m.cfg.Self.Node, Leader: n5.Node, Term: epoch, Epoch: epoch})
	m.AcquireFailed(now, epoch, epoch, time.Second)
	if st := m.Status(); !st.Leader.IsZero() {
		t.Fatalf("after the round failed: following %v, which resigned during the round; want no leader", st.Leader)
	}

	// A COORDINATOR passed over in one round is not followed when a later
	// round fails: it may be long stale.
	m, now, epoch = passedOver()
	m.Acquired(now, epoch)
	m.LeaseLost(now, epoch)
	m.Ready()
	next, _ := nextRound(t, m, &now, time.Minute)
	m.AcquireFailed(now, next, next, time.Second)
	if st := m.Status(); !st.Leader.IsZero() {
		t.Fatalf("after a later round failed: following %v, want no leader", st.Leader)
	}
}
