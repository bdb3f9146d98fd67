package bully

import (
	"fmt"
	"github.com/tenurehq/tenure/internal/testlog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestHighestIDWins(t *testing.T) {
	s := newSim(t, true)
	names := s.startCluster(5)
	s.run(4 * time.Second)
	if got := s.leaders(); !slices.Equal(got, []string{"n5"}) {
		t.Fatalf("leaders = %v, want [n5]\n%s", got, s.dump())
	}
	if epoch := s.agree("n5", names...); epoch != 1 {
		t.Fatalf("first term epoch = %d, want 1", epoch)
	}
}

func TestIneligibleNodeNeverLeads(t *testing.T) {
	s := newSim(t, true)
	s.add("n1", 1, true)
	s.add("n2", 2, true)
	s.add("n9", 9, false)
	s.run(4 * time.Second)
	if got := s.leaders(); !slices.Equal(got, []string{"n2"}) {
		t.Fatalf("leaders = %v, want [n2]\n%s", got, s.dump())
	}
	s.agree("n2", "n1", "n9")
}

func TestLeaderCrashNextHighestLeads(t *testing.T) {
	s := newSim(t, true)
	s.startCluster(4)
	s.run(4 * time.Second)
	first := s.agree("n4", "n1", "n2", "n3")
	s.crash("n4")
	// The next highest has no one above it: it campaigns after jitter only.
	s.run(s.nodes["n3"].m.cfg.Jitter + 5*s.step)
	second := s.agree("n3", "n1", "n2")
	if second <= first {
		t.Fatalf("epoch after crash = %d, want > %d", second, first)
	}
}

func TestHigherNodeJoiningPreemptsAfterStabilization(t *testing.T) {
	s := newSim(t, true)
	s.startCluster(3)
	s.run(4 * time.Second)
	first := s.agree("n3", "n1", "n2")
	stab := s.nodes["n3"].m.cfg.Stabilization
	s.add("n9", 9, true)
	s.run(stab - 200*time.Millisecond)
	// Still the old leader: the newcomer adopted it rather than bully in.
	s.agree("n3", "n1", "n2", "n9")
	s.run(time.Second)
	second := s.agree("n9", "n1", "n2", "n3")
	if second <= first {
		t.Fatalf("epoch after preemption = %d, want > %d", second, first)
	}
	if ended := s.nodes["n3"].ended; len(ended) != 1 || !strings.HasPrefix(ended[0], "preempted by n9") {
		t.Fatalf("n3's term ended for %q, want one end, preempted by n9", ended)
	}
}

func TestNoPreemptKeepsStableLeader(t *testing.T) {
	s := newSim(t, false)
	s.startCluster(3)
	s.run(4 * time.Second)
	s.add("n9", 9, true)
	s.run(20 * time.Second)
	s.agree("n3", "n1", "n2", "n9")
}

// TestElectionAnswerCoordinator checks the classic exchange: the lowest node
// notices the leader's death first and sends ELECTION to every higher node;
// they ANSWER, and the highest survivor announces itself with COORDINATOR.
func TestElectionAnswerCoordinator(t *testing.T) {
	s := newSim(t, true)
	s.startCluster(4)
	s.run(4 * time.Second)
	s.agree("n4", "n1", "n2", "n3")
	s.nodes["n2"].frozen, s.nodes["n3"].frozen = true, true
	s.crash("n4") // only n1 sees it
	s.trace = nil
	s.run(s.nodes["n1"].m.cfg.RankDelay*2 + s.nodes["n1"].m.cfg.Jitter + 3*s.step)
	want := []string{
		"ELECTION n1->n2", "ELECTION n1->n3",
		"ANSWER n2->n1 leader=n4", "ANSWER n3->n1 leader=n4",
	}
	if got := brief(s.trace); !slices.Equal(got, want) {
		t.Fatalf("trace = %q, want %q", got, want)
	}
	if st := s.nodes["n1"].m.Status(); st.State != StateWaiting {
		t.Fatalf("n1 is %v, want waiting for COORDINATOR", st.State)
	}
	s.trace = nil
	s.nodes["n2"].frozen, s.nodes["n3"].frozen = false, false
	s.syncViews()
	s.run(time.Second)
	want = []string{"COORDINATOR n3->n1 leader=n3", "COORDINATOR n3->n2 leader=n3"}
	if got := brief(s.trace); !slices.Equal(got, want) {
		t.Fatalf("trace = %q, want %q", got, want)
	}
	s.agree("n3", "n1", "n2")
}

// TestElectionStartsElectionAbove checks the bully rule that a node receiving
// ELECTION while no leader is known answers and starts its own election.
func TestElectionStartsElectionAbove(t *testing.T) {
	m, cfg, now := newMachine(t, 2, "n2")
	n1, n3 := Node{ID: 1, Name: "n1"}, Node{ID: 3, Name: "n3"}
	m.SetMembers(now, []Member{{Node: n1, Eligible: true}, cfg.Self, {Node: n3, Eligible: true}})
	m.Ready()
	reply := m.Step(now, Message{Type: MsgElection, From: n1, To: cfg.Self.Node})
	if reply == nil || reply.Type != MsgAnswer || reply.To != n1 {
		t.Fatalf("reply = %v, want ANSWER to n1", reply)
	}
	rd := m.Ready()
	if got := brief(rd.Messages); !slices.Equal(got, []string{"ELECTION n2->n3"}) {
		t.Fatalf("sent %q, want ELECTION to n3", got)
	}
	// No ANSWER within the election timeout: n2 wins and asks for a lease.
	m.Tick(now.Add(cfg.ElectionTimeout))
	if rd := m.Ready(); rd.Acquire != 1 || rd.Epoch != 1 {
		t.Fatalf("ready = %+v, want Acquire 1 with Epoch 1", rd)
	}
}

func TestPartitionElectsOneLeaderPerSide(t *testing.T) {
	s := newSim(t, true)
	names := s.startCluster(5)
	s.run(4 * time.Second)
	first := s.agree("n5", names...)
	s.partition([]string{"n1", "n2"}, []string{"n3", "n4", "n5"})
	s.run(3 * time.Second)
	if got := s.leaders(); !slices.Equal(got, []string{"n2", "n5"}) {
		t.Fatalf("leaders = %v, want one per side [n2 n5]\n%s", got, s.dump())
	}
	s.agree("n2", "n1")
	s.agree("n5", "n3", "n4")
	s.heal()
	s.run(3 * time.Second)
	healed := s.agree("n5", names...)
	if healed <= first {
		t.Fatalf("epoch after heal = %d, want > %d", healed, first)
	}
}

func TestResignHandsOverAndHolds(t *testing.T) {
	s := newSim(t, true)
	names := s.startCluster(3)
	s.run(4 * time.Second)
	first := s.agree("n3", names...)
	if err := s.nodes["n3"].m.Resign(s.now); err != nil {
		t.Fatal(err)
	}
	rd := s.nodes["n3"].m.Ready()
	if rd.Release != first {
		t.Fatalf("resign released %d, want %d", rd.Release, first)
	}
	s.queue = append(s.queue, rd.Messages...)
	s.run(500 * time.Millisecond)
	second := s.agree("n2", "n1", "n3")
	if second <= first {
		t.Fatalf("epoch after resign = %d, want > %d", second, first)
	}
	if err := s.nodes["n1"].m.Resign(s.now); err != ErrNotLeader {
		t.Fatalf("follower resign = %v, want ErrNotLeader", err)
	}
	// n3 does not take leadership back from n2 (TestResignIsNotUndone-
	// ByPreemption), but it leads again once n2 is gone after its hold.
	cfg := s.nodes["n3"].m.cfg
	s.run(cfg.ResignHold)
	s.crash("n2")
	s.run(cfg.Jitter + time.Second)
	if third := s.agree("n3", "n1"); third <= second {
		t.Fatalf("epoch after n2 went = %d, want > %d", third, second)
	}
}

func TestEpochSurvivesRestart(t *testing.T) {
	s := newSim(t, true)
	names := s.startCluster(3)
	s.run(4 * time.Second)
	first := s.agree("n3", names...)
	for _, name := range names {
		s.crash(name)
	}
	for _, name := range names {
		s.start(name)
	}
	s.run(4 * time.Second)
	if second := s.agree("n3", names...); second <= first {
		t.Fatalf("epoch after full restart = %d, want > %d", second, first)
	}
}

// TestRandomSchedules drives clusters through random crashes, restarts,
// partitions, message loss, resigns, transfers and drains. The sim checks after every step that
// persisted epochs never go back, that a node never uses an epoch before it
// is persisted, and that the terms each node leads or follows strictly grow.
// Once the network is healed and quiet, exactly one leader must emerge.
// In every other schedule the nodes take a report of their leader's
// failure for a wrong one when its COORDINATOR came within the LAN
// timing's detection floor (Config.MinDetection); the simulation's views
// change the moment a node crashes, so they keep crashed leaders too.
func TestRandomSchedules(t *testing.T) {
	runs := 60
	if testing.Short() {
		runs = 15
	}
	for i := range runs {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			s := newSim(t, i%3 != 0)
			if i%2 == 1 {
				base := s.base
				s.base = func(self Member) Config {
					c := base(self)
					c.MinDetection = 4500 * time.Millisecond
					return c
				}
			}
			names := s.startCluster(3 + i%4)
			for range 25 {
				s.randomFault(names)
				s.run(time.Duration(s.rand.IntN(3000)) * time.Millisecond)
			}
			s.heal()
			s.drop = 0
			for _, name := range names {
				s.nodes[name].member.Eligible = true // drains end
				if !s.nodes[name].up {
					s.start(name)
				}
				s.setEligible(name, true)
			}
			s.run(30 * time.Second)
			if got := s.leaders(); len(got) != 1 {
				t.Fatalf("leaders after healing = %v, want one\n%s", got, s.dump())
			}
			s.agree(s.leaders()[0], names...)
		})
	}
}

func (s *sim) randomFault(names []string) {
	pick := names[s.rand.IntN(len(names))]
	switch s.rand.IntN(8) {
	case 0:
		s.crash(pick)
	case 1:
		if !s.nodes[pick].up {
			s.start(pick)
		}
	case 2:
		k := 1 + s.rand.IntN(len(names)-1)
		perm := s.rand.Perm(len(names))
		var a, b []string
		for j, p := range perm {
			if j < k {
				a = append(a, names[p])
			} else {
				b = append(b, names[p])
			}
		}
		s.partition(a, b)
	case 3:
		s.heal()
	case 4:
		s.drop = []float64{0, 0.1, 0.3}[s.rand.IntN(3)]
	case 5:
		if n := s.nodes[pick]; n.up {
			_ = n.m.Resign(s.now)
			s.flush(pick)
		}
	case 6:
		if n := s.nodes[pick]; n.up {
			to := s.nodes[names[s.rand.IntN(len(names))]].member.Node
			_ = n.m.ResignWith(s.now, Handover{Successor: to})
			s.flush(pick)
		}
	case 7:
		if n := s.nodes[pick]; n.up {
			s.setEligible(pick, !n.member.Eligible) // drain, or its end
		}
	}
}

func brief(msgs []Message) []string {
	var out []string
	for _, m := range msgs {
		s := fmt.Sprintf("%s %s->%s", m.Type, m.From.Name, m.To.Name)
		if !m.Leader.IsZero() {
			s += " leader=" + m.Leader.Name
		}
		out = append(out, s)
	}
	return out
}

// TestFrozenHigherNodeDoesNotChurnTerms: a higher node that gossip still
// lists but that answers nothing (a frozen process) must not make the new
// leader yield to it over and over: at most once per two stabilisation
// delays (when the silence is forgotten and tested again), instead of
// every election round. Once it speaks again, preemption works.
func TestFrozenHigherNodeDoesNotChurnTerms(t *testing.T) {
	s := newSim(t, true)
	s.startCluster(3)
	s.run(4 * time.Second)
	s.agree("n3", "n1", "n2")
	s.nodes["n3"].mute = true
	cfg := s.nodes["n2"].m.cfg
	s.run(3*cfg.AnnounceInterval + 2*time.Second)
	first := s.agree("n2", "n1")
	s.run(3 * cfg.Stabilization)
	if got := s.agree("n2", "n1"); got < first || len(s.nodes["n2"].terms) > 2 {
		t.Fatalf("n2 led terms %v in three stabilisation delays while n3 was frozen; want at most 2", s.nodes["n2"].terms)
	}
	s.nodes["n3"].mute = false
	s.run(cfg.Stabilization + 5*time.Second)
	if len(s.leaders()) != 1 || s.leaders()[0] != "n3" {
		t.Fatalf("after n3 woke: leaders %v, want n3 back (preemption)\n%s", s.leaders(), s.dump())
	}
}

// TestCutOffHigherNodeNeitherBlocksNorPreempts: the highest node n3 can
// reach too few voters (SetReach cutOff): it must not answer the others'
// ELECTIONs or campaign, so n2 leads, and n2 must not hand over to it
// while it does not claim. Once it can lead again, it claims and takes
// over after the stabilisation delay.
func TestCutOffHigherNodeNeitherBlocksNorPreempts(t *testing.T) {
	s := newSim(t, true)
	s.startCluster(3)
	s.nodes["n3"].m.SetReach(true, false)
	cfg := s.nodes["n2"].m.cfg
	s.run(cfg.StartupDelay + 2*time.Second)
	first := s.agree("n2", "n1", "n3")
	s.run(3 * cfg.Stabilization)
	if got := s.agree("n2", "n1", "n3"); got != first {
		t.Fatalf("n2's term changed from %d to %d while n3 was cut off", first, got)
	}
	s.nodes["n3"].m.SetReach(false, true)
	s.run(cfg.AnnounceInterval + cfg.Stabilization + time.Second)
	if got := s.agree("n3", "n1", "n2"); got <= first {
		t.Fatalf("n3 took over with epoch %d, want > %d", got, first)
	}
}

// TestWithdrawnClaimIsNotYieldedTo: n3 claims leadership from n2 in
// answer to two COORDINATORs, then finds itself cut off from the voters
// and stops claiming before the stabilisation delay is over. n2 must not
// hand its term over on the earlier claims (n3 could not take it): a
// claim counts only once it answers the latest COORDINATOR. The timing is
// the local profile's (announcements every second, a 2 s stabilisation
// delay), where the stabilisation delay spans two announcements.
func TestWithdrawnClaimIsNotYieldedTo(t *testing.T) {
	s := newSim(t, true)
	base := s.base
	s.base = func(self Member) Config {
		c := base(self)
		c.AnnounceInterval, c.Stabilization, c.ElectionTimeout = time.Second, 2*time.Second, 200*time.Millisecond
		return c
	}
	s.startCluster(3)
	n3 := s.nodes["n3"].m
	n3.SetReach(true, false)
	cfg := s.nodes["n2"].m.cfg
	s.run(cfg.StartupDelay + 2*time.Second)
	first := s.agree("n2", "n1", "n3")
	n3.SetReach(false, true)
	n2 := s.nodes["n2"].m
	end := s.now.Add(3 * cfg.AnnounceInterval)
	for c := n2.claims["n3"]; !c.last.After(c.since); c = n2.claims["n3"] {
		if s.now.After(end) {
			t.Fatal("n3 does not claim")
		}
		s.tick()
	}
	n3.SetReach(true, false) // its next probe found it cut off
	s.run(n2.claimGap() + cfg.Stabilization)
	if got := s.agree("n2", "n1", "n3"); got != first {
		t.Fatalf("n2's term changed from %d to %d: it yielded to n3 on claims n3 had stopped making", first, got)
	}
}

// TestPreemptionWaitsForTheDriver: with ConfirmPreempt, a leader about to
// yield to a higher node that kept claiming asks its driver first
// (Ready.Preempt) and keeps its term until the driver answers yes. A no
// makes it forget the claims: it asks again only after the claimant has
// claimed for another stabilisation delay. An answer that never comes
// holds the yield off, and the leader asks again once a claim gap has
// passed.
func TestPreemptionWaitsForTheDriver(t *testing.T) {
	s := newSim(t, true)
	base := s.base
	s.base = func(self Member) Config {
		c := base(self)
		c.ConfirmPreempt = true
		return c
	}
	var asks []time.Time
	answer := func(canTake, answered bool) {
		s.confirm = func(leader, to Node) (bool, bool) {
			if leader.Name != "n3" || to.Name != "n9" {
				t.Fatalf("%s asked about %s, want n3 about n9", leader.Name, to.Name)
			}
			asks = append(asks, s.now)
			return canTake, answered
		}
	}
	answer(false, false) // the driver never answers
	s.startCluster(3)
	s.run(4 * time.Second)
	first := s.agree("n3", "n1", "n2")
	cfg := s.nodes["n3"].m.cfg
	s.add("n9", 9, true)
	s.run(cfg.Stabilization + 2*cfg.AnnounceInterval)
	if got := s.agree("n3", "n1", "n2", "n9"); got != first || len(asks) != 1 {
		t.Fatalf("with no answer: n3 leads term %d (first %d) and asked %d times, want its first term and one ask", got, first, len(asks))
	}
	gap := s.nodes["n3"].m.claimGap()
	s.run(gap)
	if len(asks) != 2 || asks[1].Sub(asks[0]) < gap {
		t.Fatalf("asks with no answer at %v; want a second one a claim gap (%v) after the first", asks, gap)
	}
	answer(false, true) // it cannot take the term
	s.run(gap)
	if got := s.agree("n3", "n1", "n2", "n9"); got != first || len(asks) != 3 {
		t.Fatalf("after a refusal: n3 leads term %d (first %d), asks %v; want its first term and a third ask", got, first, asks)
	}
	refused := asks[2]
	answer(true, true)
	s.run(cfg.Stabilization + 2*cfg.AnnounceInterval)
	if got := s.agree("n9", "n1", "n2", "n3"); got <= first || len(asks) != 4 {
		t.Fatalf("after a yes: term %d (first %d), asks %v; want n9's term after one more ask", got, first, asks)
	}
	if d := asks[3].Sub(refused); d < cfg.Stabilization {
		t.Fatalf("n3 asked again %v after the refusal, within the stabilisation delay %v: it kept n9's old claims", d, cfg.Stabilization)
	}
}

// TestEpochJumpIsRefused: a message naming an epoch or term more than
// MaxEpochJump above what the node has seen is dropped and reported, never
// adopted: one forged ELECTION or COORDINATOR cannot throw the epochs far
// ahead (or wrap them).
func TestEpochJumpIsRefused(t *testing.T) {
	m, cfg, t0 := newMachine(t, 1, "a", func(c *Config) { c.Epoch = 5 })
	evil := Node{ID: 9, Name: "x"}
	m.SetMembers(t0, []Member{{Node: evil, Eligible: true}})
	huge := uint64(5 + DefaultMaxEpochJump + 1)
	if r := m.Step(t0, Message{Type: MsgElection, From: evil, To: cfg.Self.Node, Epoch: huge}); r != nil {
		t.Fatalf("answered a message with a jumping epoch: %+v", r)
	}
	m.Step(t0, Message{Type: MsgCoordinator, From: evil, To: cfg.Self.Node, Leader: evil, Term: 1<<64 - 1})
	rd := m.Ready()
	if st := m.Status(); st.Epoch != 5 || !st.Leader.IsZero() {
		t.Fatalf("after forged messages: epoch %d leader %v, want 5 and none", st.Epoch, st.Leader)
	}
	if rd.RefusedEpoch != 1<<64-1 || rd.RefusedFrom != evil {
		t.Fatalf("refusal reported as %d from %v", rd.RefusedEpoch, rd.RefusedFrom)
	}
	ok := uint64(5 + DefaultMaxEpochJump)
	m.Step(t0, Message{Type: MsgCoordinator, From: evil, To: cfg.Self.Node, Leader: evil, Term: ok})
	if st := m.Status(); st.Epoch != ok || st.Leader != evil {
		t.Fatalf("a jump within the bound was not adopted: %+v", st)
	}
}

// TestEpochNeverWraps: at the largest epoch a node does not campaign (it
// would wrap to zero); it reports Exhausted instead.
func TestEpochNeverWraps(t *testing.T) {
	m, cfg, t0 := newMachine(t, 1, "a", func(c *Config) { c.Epoch = 1<<64 - 1 })
	m.Tick(t0.Add(cfg.StartupDelay + cfg.Jitter))
	rd := m.Ready()
	if rd.Acquire != 0 || !rd.Exhausted || rd.Epoch != 1<<64-1 {
		t.Fatalf("at the largest epoch: acquire %d exhausted %v epoch %d", rd.Acquire, rd.Exhausted, rd.Epoch)
	}
}

// TestElectionAsksTheHighestFewInRounds checks that a campaign asks only
// the ElectionFanout highest nodes above it, marks them silent when none
// answers, asks the next ones, and wins only once every higher node was
// asked in vain.
func TestElectionAsksTheHighestFewInRounds(t *testing.T) {
	m, cfg, now := newMachine(t, 1, "n01", func(c *Config) { c.ElectionFanout = 3 })
	members := []Member{cfg.Self}
	for i := 2; i <= 8; i++ {
		members = append(members, Member{Node: Node{ID: uint64(i), Name: fmt.Sprintf("n%02d", i)}, Eligible: true})
	}
	m.SetMembers(now, members)
	m.Ready()
	rounds := [][]string{
		{"ELECTION n01->n06", "ELECTION n01->n07", "ELECTION n01->n08"},
		{"ELECTION n01->n03", "ELECTION n01->n04", "ELECTION n01->n05"},
		{"ELECTION n01->n02"},
	}
	m.startElection(now)
	for i, want := range rounds {
		if got := brief(m.Ready().Messages); !slices.Equal(got, want) {
			t.Fatalf("round %d sent %q, want %q", i+1, got, want)
		}
		if st := m.Status(); st.State != StateElecting {
			t.Fatalf("after round %d: %v, want electing", i+1, st.State)
		}
		now = now.Add(cfg.ElectionTimeout)
		m.Tick(now)
	}
	if rd := m.Ready(); rd.Acquire != 1 || len(rd.Messages) != 0 {
		t.Fatalf("after every higher node was asked in vain: ready = %+v, want Acquire 1 and no message", rd)
	}
}

// TestFirstCampaignWaitsItsRank: a fresh node campaigns after the startup
// delay plus one rank delay per higher eligible live node, and the time
// moves as gossip reveals more of them; the highest campaigns at the end
// of the startup delay.
func TestFirstCampaignWaitsItsRank(t *testing.T) {
	m, cfg, start := newMachine(t, 3, "n03")
	member := func(id int, eligible bool) Member {
		return Member{Node: Node{ID: uint64(id), Name: fmt.Sprintf("n%02d", id)}, Eligible: eligible}
	}
	within := func(what string, got, lo time.Duration) {
		t.Helper()
		if got < lo || got > lo+cfg.Jitter {
			t.Fatalf("%s: campaign %v after start, want %v plus at most %v jitter", what, got, lo, cfg.Jitter)
		}
	}
	within("alone", m.Deadline().Sub(start), cfg.StartupDelay)
	now := start.Add(500 * time.Millisecond)
	m.SetMembers(now, []Member{cfg.Self, member(1, true), member(2, true)})
	within("above the others", m.Deadline().Sub(start), cfg.StartupDelay)
	now = now.Add(500 * time.Millisecond)
	m.SetMembers(now, []Member{cfg.Self, member(1, true), member(4, true), member(5, false), member(6, true)})
	within("two eligible above", m.Deadline().Sub(start), cfg.StartupDelay+2*cfg.RankDelay)
	m.Tick(start.Add(cfg.StartupDelay + cfg.RankDelay))
	if rd := m.Ready(); len(rd.Messages) != 0 || rd.Acquire != 0 {
		t.Fatalf("campaigned before its turn: %+v", rd)
	}
	m.Tick(start.Add(cfg.StartupDelay + 2*cfg.RankDelay + cfg.Jitter))
	if got := brief(m.Ready().Messages); !slices.Equal(got, []string{"ELECTION n03->n04", "ELECTION n03->n06"}) {
		t.Fatalf("at its turn sent %q, want ELECTION to n04 and n06", got)
	}
}

// TestFirstCampaignWaitsForJoinsToSettle: while gossip keeps revealing
// eligible members, a fresh node's first campaign comes no sooner than
// half a startup delay after the last of them, and no later than three
// startup delays after the start (plus the rank delay). A node that
// campaigned at the end of its startup delay while the joins of the
// nodes above it were still spreading won, and was preempted.
func TestFirstCampaignWaitsForJoinsToSettle(t *testing.T) {
	m, cfg, start := newMachine(t, 20, "n20")
	members := []Member{cfg.Self}
	join := func(at time.Duration, ids ...int) {
		for _, id := range ids {
			members = append(members, Member{Node: Node{ID: uint64(id), Name: fmt.Sprintf("n%02d", id)}, Eligible: true})
		}
		m.SetMembers(start.Add(at), slices.Clone(members))
	}
	within := func(what string, lo time.Duration) {
		t.Helper()
		if got := m.Deadline().Sub(start); got < lo || got > lo+cfg.Jitter {
			t.Fatalf("%s: campaign %v after start, want %v plus at most %v jitter", what, got, lo, cfg.Jitter)
		}
	}
	join(300*time.Millisecond, 1, 2, 3)
	within("joined early", cfg.StartupDelay)
	join(cfg.StartupDelay-200*time.Millisecond, 4)
	within("a member revealed late", cfg.StartupDelay-200*time.Millisecond+cfg.StartupDelay/2)
	join(cfg.StartupDelay+cfg.StartupDelay/4, 21)
	within("one above, revealed later still", cfg.StartupDelay+cfg.StartupDelay/4+cfg.StartupDelay/2+cfg.RankDelay)
	for at := 2 * cfg.StartupDelay; at < 4*cfg.StartupDelay; at += cfg.StartupDelay / 4 {
		join(at, 5+int((at-2*cfg.StartupDelay)/(cfg.StartupDelay/4))) // n05..n12, below this node
	}
	within("joins that keep coming", 3*cfg.StartupDelay+cfg.RankDelay)
}

// TestFleetStartCampaignsOnce: sixty nodes start within a second. The
// highest campaigns first and the others follow its COORDINATOR, so the
// fleet sends no ELECTION at all; before the first campaign waited its
// rank, every node asked the three highest at the end of its startup delay.
func TestFleetStartCampaignsOnce(t *testing.T) {
	s := newSim(t, true)
	var names []string
	for i := 1; i <= 60; i++ {
		names = append(names, fmt.Sprintf("n%d", i))
		s.add(names[i-1], uint64(i), true)
		s.run(15 * time.Millisecond)
	}
	s.run(5 * time.Second)
	s.agree("n60", names...)
	var elections int
	for _, msg := range s.trace {
		if msg.Type == MsgElection {
			elections++
		}
	}
	if elections != 0 {
		t.Fatalf("%d ELECTION messages in a fleet start, want 0", elections)
	}
}

// newMachine makes an eligible Machine with DefaultConfig, changed by
// adjust if given, started at time.Unix(0, 0).
func newMachine(t *testing.T, id uint64, name string, adjust ...func(*Config)) (*Machine, Config, time.Time) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Self = Member{Node: Node{ID: id, Name: name}, Eligible: true}
	for _, f := range adjust {
		f(&cfg)
	}
	start := time.Unix(0, 0)
	m, err := New(cfg, start)
	if err != nil {
		t.Fatal(err)
	}
	return m, cfg, start
}

// TestLeaderAheadOfGossipIsFollowed: a COORDINATOR can come from a node
// gossip does not list yet (in a fleet that starts together, joins take
// seconds to spread on a loaded host). The follower keeps it while the
// membership catches up, until its next COORDINATOR is overdue (at least
// CoordinatorTimeout; see TestLeaderHeardOnScheduleIsKept); it forgets at
// once a leader gossip listed and no longer does (with MinDetection zero:
// see TestWronglyReportedLeaderIsKept). Before, every membership
// update dropped the unlisted leader, and followers kept losing and
// relearning their first leader.
func TestLeaderAheadOfGossipIsFollowed(t *testing.T) {
	m, cfg, now := newMachine(t, 2, "n2")
	n1, n9 := Member{Node: Node{ID: 1, Name: "n1"}, Eligible: true}, Member{Node: Node{ID: 9, Name: "n9"}, Eligible: true}
	without, with := []Member{cfg.Self, n1}, []Member{cfg.Self, n1, n9}
	m.SetMembers(now, without)
	m.Step(now, Message{Type: MsgCoordinator, From: n9.Node, To: cfg.Self.Node, Leader: n9.Node, Term: 1})
	leads := func(what string, want Node) {
		t.Helper()
		if got := m.Status().Leader; got != want {
			t.Fatalf("%s: leader %v, want %v", what, got, want)
		}
	}
	leads("after its COORDINATOR", n9.Node)
	m.SetMembers(now.Add(100*time.Millisecond), without)
	m.Tick(now.Add(100 * time.Millisecond))
	leads("membership without it", n9.Node)
	m.SetMembers(now.Add(time.Second), with)
	m.Tick(now.Add(cfg.CoordinatorTimeout + time.Millisecond))
	leads("listed, past the timeout", n9.Node)
	m.SetMembers(now.Add(cfg.CoordinatorTimeout+time.Second), without)
	leads("gossip reports it gone", Node{})

	m, cfg, now = newMachine(t, 2, "n2")
	m.SetMembers(now, without)
	m.Step(now, Message{Type: MsgCoordinator, From: n9.Node, To: cfg.Self.Node, Leader: n9.Node, Term: 1})
	overdue := max(cfg.CoordinatorTimeout, cfg.AnnounceInterval+cfg.ElectionTimeout)
	for at := time.Duration(0); at < overdue; at += 250 * time.Millisecond {
		m.SetMembers(now.Add(at), without)
		m.Tick(now.Add(at))
	}
	leads("never listed, its next COORDINATOR not yet overdue", n9.Node)
	m.Tick(now.Add(overdue))
	leads("never listed, its next COORDINATOR overdue", Node{})
}

// TestRelayedLeaderIsFollowed: a node that knows no leader follows the one
// another member reports following (Relayed), if gossip lists it live and
// its term is later than any followed; a relayed term no later, a leader
// not live, or a node that already follows a leader changes nothing.
func TestRelayedLeaderIsFollowed(t *testing.T) {
	n5, n9 := Node{ID: 5, Name: "n5"}, Node{ID: 9, Name: "n9"}
	fresh := func() (*Machine, time.Time) {
		m, cfg, now := newMachine(t, 2, "n2")
		m.SetMembers(now, []Member{cfg.Self, {Node: n5, Eligible: true}, {Node: n9, Eligible: true}})
		return m, now
	}
	leads := func(m *Machine, what string, want Node, term uint64) {
		t.Helper()
		if st := m.Status(); st.Leader != want || st.Term != term {
			t.Fatalf("%s: leader %v term %d, want %v term %d", what, st.Leader, st.Term, want, term)
		}
	}

	m, now := fresh()
	m.Relayed(now, n9, 4)
	leads(m, "relayed to a fresh node", n9, 4)
	if d := m.Deadline(); !d.IsZero() {
		t.Errorf("a campaign is still due at %v after following the relayed leader", d)
	}
	m.Relayed(now, n5, 7)
	leads(m, "a later term relayed while following", n9, 4)

	m, now = fresh()
	m.Relayed(now, Node{ID: 7, Name: "n7"}, 4)
	leads(m, "a leader gossip does not list", Node{}, 0)

	m, now = fresh()
	m.Step(now, Message{Type: MsgCoordinator, From: n9, To: Node{ID: 2, Name: "n2"}, Leader: n9, Term: 4})
	m.SetMembers(now, []Member{{Node: Node{ID: 2, Name: "n2"}, Eligible: true}, {Node: n5, Eligible: true}})
	leads(m, "its leader left gossip", Node{}, 0)
	m.Relayed(now, n5, 4)
	leads(m, "a term no later than the one followed", Node{}, 0)
	m.Relayed(now, n5, 5)
	leads(m, "a later term", n5, 5)
}

// TestWronglyReportedLeaderIsKept: gossip reports the followed leader
// failed less than MinDetection after its last COORDINATOR (a healed node's
// late report, refuted at once). The follower keeps the leader, sends no
// ELECTION, and still follows it once gossip lists it again; without the
// refutation it forgets the leader when the next COORDINATOR is overdue.
// A renewal of its term through this node (Heard) counts as a
// COORDINATOR; one of another node or term does not. A report
// MinDetection or more after the last of them, or with MinDetection zero,
// is believed at once.
func TestWronglyReportedLeaderIsKept(t *testing.T) {
	const detect = 700 * time.Millisecond
	n1, n9 := Member{Node: Node{ID: 1, Name: "n1"}, Eligible: true}, Member{Node: Node{ID: 9, Name: "n9"}, Eligible: true}
	follower := func(detection time.Duration) (*Machine, Config, time.Time) {
		m, cfg, now := newMachine(t, 2, "n2", func(c *Config) { c.MinDetection = detection })
		m.SetMembers(now, []Member{cfg.Self, n1, n9})
		m.Step(now, Message{Type: MsgCoordinator, From: n9.Node, To: cfg.Self.Node, Leader: n9.Node, Term: 3})
		m.Ready()
		return m, cfg, now
	}
	without, with := []Member{n1}, []Member{n1, n9}
	leads := func(m *Machine, what string, want Node) {
		t.Helper()
		if got := m.Status().Leader; got != want {
			t.Fatalf("%s: leader %v, want %v", what, got, want)
		}
	}
	quiet := func(m *Machine, what string) {
		t.Helper()
		if r := m.Ready(); len(r.Messages) > 0 {
			t.Fatalf("%s: sent %v, want nothing", what, brief(r.Messages))
		}
	}

	m, cfg, now := follower(detect)
	at := now.Add(detect - time.Millisecond)
	m.SetMembers(at, without)
	m.Tick(at)
	leads(m, "reported failed just after its COORDINATOR", n9.Node)
	quiet(m, "reported failed")
	m.SetMembers(at.Add(5*time.Millisecond), with)
	for d := time.Duration(0); d <= cfg.AnnounceInterval+cfg.ElectionTimeout; d += 100 * time.Millisecond {
		m.Tick(at.Add(d))
	}
	leads(m, "refuted", n9.Node)
	quiet(m, "refuted")

	m, cfg, now = follower(detect)
	m.SetMembers(now.Add(100*time.Millisecond), without)
	due := now.Add(cfg.AnnounceInterval + cfg.ElectionTimeout)
	m.Tick(due.Add(-time.Millisecond))
	leads(m, "not refuted, its next COORDINATOR not yet overdue", n9.Node)
	m.Tick(due)
	leads(m, "not refuted, its next COORDINATOR overdue", Node{})
	if m.Deadline().IsZero() {
		t.Fatal("forgot the leader but scheduled no campaign")
	}

	m, _, now = follower(detect)
	m.SetMembers(now.Add(detect), without)
	leads(m, "reported failed a detection time after its COORDINATOR", Node{})

	m, _, now = follower(detect)
	m.Heard(now.Add(detect/2), n9.Node, 3) // it renewed its term through this node
	m.SetMembers(now.Add(detect), without)
	leads(m, "reported failed a detection time after its COORDINATOR, half of one after its renewal", n9.Node)
	quiet(m, "reported failed after its renewal")

	m, _, now = follower(detect)
	m.Heard(now.Add(detect/2), n1.Node, 3) // another node
	m.Heard(now.Add(detect/2), n9.Node, 2) // another term
	m.SetMembers(now.Add(detect), without)
	leads(m, "reported failed a detection time after its COORDINATOR, renewals of others heard", Node{})

	m, _, now = follower(0)
	m.SetMembers(now.Add(time.Millisecond), without)
	leads(m, "MinDetection zero", Node{})
}

// TestReportedLeaderListedAgainIsAsked: a follower that believed
// gossip's report that its leader failed asks that leader whether it still
// leads its term the moment gossip lists it live again, and follows it on
// the answer, without an election. It does not ask when the leader comes
// back later than an announce interval and an election timeout after the
// report (its COORDINATOR is due by then), nor when it has followed
// another leader meanwhile.
func TestReportedLeaderListedAgainIsAsked(t *testing.T) {
	n1, n9 := Member{Node: Node{ID: 1, Name: "n1"}, Eligible: true}, Member{Node: Node{ID: 9, Name: "n9"}, Eligible: true}
	n5 := Member{Node: Node{ID: 5, Name: "n5"}, Eligible: true}
	follower := func() (*Machine, Config, time.Time) {
		m, cfg, now := newMachine(t, 2, "n2")
		m.SetMembers(now, []Member{cfg.Self, n1, n5, n9})
		m.Step(now, Message{Type: MsgCoordinator, From: n9.Node, To: cfg.Self.Node, Leader: n9.Node, Term: 3})
		m.Ready()
		return m, cfg, now
	}
	without, with := []Member{n1, n5}, []Member{n1, n5, n9}
	asked := func(m *Machine) bool {
		for _, msg := range m.Ready().Messages {
			if msg.Type == MsgInfo && msg.To == n9.Node && msg.Leader == n9.Node && msg.Term == 3 {
				return true
			}
		}
		return false
	}

	m, cfg, now := follower()
	at := now.Add(2 * cfg.AnnounceInterval) // heard long ago: the report is believed
	m.SetMembers(at, without)
	if got := m.Status().Leader; !got.IsZero() {
		t.Fatalf("reported failed long after its COORDINATOR: leader %v, want none", got)
	}
	if asked(m) {
		t.Fatal("asked the leader gossip reports failed before gossip listed it again")
	}
	back := at.Add(50 * time.Millisecond)
	m.SetMembers(back, with)
	if !asked(m) {
		t.Fatal("gossip listed the reported leader again: no INFO asking it about its term")
	}
	m.Step(back.Add(time.Millisecond), Message{Type: MsgCoordinator, From: n9.Node, To: cfg.Self.Node, Leader: n9.Node, Term: 3})
	if st := m.Status(); st.Leader != n9.Node || st.Term != 3 {
		t.Fatalf("answered with its COORDINATOR: leader %v term %d, want n9 term 3", st.Leader, st.Term)
	}
	m.SetMembers(back.Add(time.Second), with)
	if asked(m) {
		t.Fatal("asked again")
	}

	m, cfg, now = follower()
	at = now.Add(2 * cfg.AnnounceInterval)
	m.SetMembers(at, without)
	m.SetMembers(at.Add(cfg.AnnounceInterval+cfg.ElectionTimeout+time.Millisecond), with)
	if asked(m) {
		t.Fatal("asked a leader listed again after its next COORDINATOR was due")
	}

	m, cfg, now = follower()
	at = now.Add(2 * cfg.AnnounceInterval)
	m.SetMembers(at, without)
	m.Step(at.Add(10*time.Millisecond), Message{Type: MsgCoordinator, From: n5.Node, To: cfg.Self.Node, Leader: n5.Node, Term: 4})
	m.Ready()
	m.SetMembers(at.Add(50*time.Millisecond), with)
	if asked(m) {
		t.Fatal("asked the reported leader after following a later term")
	}
}

// TestStatusSaysWhyTheLeaderWasLost: with no leader known, Status.Lost
// names the leader last known and why it was forgotten; it is empty
// while a leader is known and before any was.
func TestStatusSaysWhyTheLeaderWasLost(t *testing.T) {
	n9 := Member{Node: Node{ID: 9, Name: "n9"}, Eligible: true}
	following := func() (*Machine, Config, time.Time) {
		m, cfg, now := newMachine(t, 2, "n2")
		if got := m.Status().Lost; got != "" {
			t.Fatalf("a fresh node: Lost = %q, want empty", got)
		}
		m.SetMembers(now, []Member{cfg.Self, n9})
		m.Step(now, Message{Type: MsgCoordinator, From: n9.Node, To: cfg.Self.Node, Leader: n9.Node, Term: 3})
		if st := m.Status(); st.Leader != n9.Node || st.Lost != "" {
			t.Fatalf("following n9: %+v, want n9 and Lost empty", st)
		}
		return m, cfg, now
	}
	lost := func(m *Machine, want string) {
		t.Helper()
		if st := m.Status(); !st.Leader.IsZero() || st.Lost != want {
			t.Fatalf("leader %v, Lost %q; want none and %q", st.Leader, st.Lost, want)
		}
	}
	m, cfg, now := following()
	m.SetMembers(now.Add(time.Second), []Member{cfg.Self})
	lost(m, "n9: gossip reports it failed")

	m, cfg, now = following()
	m.Step(now, Message{Type: MsgResign, From: n9.Node, To: cfg.Self.Node, Leader: n9.Node, Term: 3})
	lost(m, "n9: it resigned")

	m, cfg, now = following()
	m.Tick(now.Add(3 * cfg.AnnounceInterval))
	m.Tick(now.Add(3*cfg.AnnounceInterval + cfg.CoordinatorTimeout))
	lost(m, "n9: no COORDINATOR from it for three announce intervals, nor when asked")
}

// TestSilentLeaderIsAskedBeforeItIsForgotten: three announce intervals
// after its leader's last COORDINATOR, a follower asks the leader (an
// INFO naming the leader's term) and keeps it; a COORDINATOR in answer
// keeps it for another three intervals, also one that comes a second
// later, after a lost handshake packet's retransmission (waiting only an
// election timeout, the follower had forgotten it by then: a LAN soak);
// while it waits it asks again every election wait; no answer within the
// coordinator timeout of the first question, and it forgets the leader.
func TestSilentLeaderIsAskedBeforeItIsForgotten(t *testing.T) {
	n9 := Member{Node: Node{ID: 9, Name: "n9"}, Eligible: true}
	m, cfg, now := newMachine(t, 2, "n2")
	m.SetMembers(now, []Member{cfg.Self, n9})
	m.Step(now, Message{Type: MsgCoordinator, From: n9.Node, To: cfg.Self.Node, Leader: n9.Node, Term: 3, Epoch: 3})
	m.Ready()
	follows := func(at time.Time) {
		t.Helper()
		if st := m.Status(); st.Leader != n9.Node || st.Term != 3 {
			t.Fatalf("at +%v: %+v, want n9 in term 3", at.Sub(now), st)
		}
	}
	asked := func(at time.Time) {
		t.Helper()
		msgs := m.Ready().Messages
		if len(msgs) != 1 || msgs[0].Type != MsgInfo || msgs[0].To != n9.Node || msgs[0].Leader != n9.Node || msgs[0].Term != 3 {
			t.Fatalf("at +%v: sent %v, want one INFO to n9 naming its term 3", at.Sub(now), msgs)
		}
	}
	silent := now.Add(3 * cfg.AnnounceInterval)
	m.Tick(silent.Add(-time.Millisecond))
	if msgs := m.Ready().Messages; len(msgs) != 0 {
		t.Fatalf("before three intervals: sent %v", msgs)
	}
	m.Tick(silent)
	follows(silent)
	asked(silent)
	answered := silent.Add(time.Second + 10*time.Millisecond) // a SYN retransmitted, then a round trip
	if answered.Sub(silent) >= cfg.CoordinatorTimeout || answered.Sub(silent) <= m.electionWait() {
		t.Fatalf("the answer after %v must come after the election wait (%v) and within the coordinator timeout (%v)",
			answered.Sub(silent), m.electionWait(), cfg.CoordinatorTimeout)
	}
	for at := silent.Add(10 * time.Millisecond); at.Before(answered); at = at.Add(10 * time.Millisecond) {
		m.Tick(at)
		follows(at)
		if at.Sub(silent)%m.electionWait() == 0 {
			asked(at) // again, every election wait
		} else if msgs := m.Ready().Messages; len(msgs) != 0 {
			t.Fatalf("at +%v: sent %v between questions", at.Sub(now), msgs)
		}
	}
	m.Step(answered, Message{Type: MsgCoordinator, From: n9.Node, To: cfg.Self.Node, Leader: n9.Node, Term: 3, Epoch: 3})
	m.Tick(answered.Add(3*cfg.AnnounceInterval - time.Millisecond))
	follows(answered.Add(3*cfg.AnnounceInterval - time.Millisecond))

	again := answered.Add(3 * cfg.AnnounceInterval)
	m.Tick(again)
	asked(again)
	m.Tick(again.Add(cfg.CoordinatorTimeout - time.Millisecond))
	follows(again.Add(cfg.CoordinatorTimeout - time.Millisecond))
	m.Ready()
	m.Tick(again.Add(cfg.CoordinatorTimeout)) // counted from the first question, not the last
	if st := m.Status(); !st.Leader.IsZero() || st.Lost != "n9: no COORDINATOR from it for three announce intervals, nor when asked" {
		t.Fatalf("no answer: %+v, want the leader forgotten", st)
	}
}

// TestLeaderAnswersAFollowersQuestion: a leader asked by an INFO naming
// its own term answers with its COORDINATOR; an INFO naming an earlier
// term of its own (it resigned that one) or another leader gets none.
func TestLeaderAnswersAFollowersQuestion(t *testing.T) {
	m, cfg, now := newMachine(t, 9, "n9")
	n2 := Member{Node: Node{ID: 2, Name: "n2"}, Eligible: true}
	m.SetMembers(now, []Member{cfg.Self, n2})
	m.Tick(now.Add(cfg.StartupDelay + cfg.Jitter))
	st := m.Status()
	if st.State != StateAcquiring {
		t.Fatalf("n9 alone: %+v, want it acquiring", st)
	}
	m.Acquired(now, st.Epoch)
	term := m.Status().Term
	m.Ready()
	reply := m.Step(now, Message{Type: MsgInfo, From: n2.Node, To: cfg.Self.Node, Leader: cfg.Self.Node, Term: term, Epoch: term})
	if reply == nil || reply.Type != MsgCoordinator || reply.To != n2.Node || reply.Leader != cfg.Self.Node || reply.Term != term || reply.From != cfg.Self.Node {
		t.Fatalf("asked about its term %d: answered %v, want its COORDINATOR", term, reply)
	}
	if reply := m.Step(now, Message{Type: MsgInfo, From: n2.Node, To: cfg.Self.Node, Leader: cfg.Self.Node, Term: term - 1, Epoch: term}); reply != nil {
		t.Fatalf("asked about an earlier term: answered %v", reply)
	}
}

// TestLateElectionFromTheLeaderIsIgnored: an ELECTION from the followed
// leader stamped with an epoch below its term was sent while it
// campaigned for that term (held back by the network): the follower keeps
// the leader. One stamped with the term or later says it campaigns again.
func TestLateElectionFromTheLeaderIsIgnored(t *testing.T) {
	n9 := Member{Node: Node{ID: 9, Name: "n9"}, Eligible: true}
	m, cfg, now := newMachine(t, 12, "n12")
	m.SetMembers(now, []Member{cfg.Self, n9})
	m.Step(now, Message{Type: MsgCoordinator, From: n9.Node, To: cfg.Self.Node, Leader: n9.Node, Term: 7, Epoch: 7})
	m.Step(now, Message{Type: MsgElection, From: n9.Node, To: cfg.Self.Node, Epoch: 6})
	if st := m.Status(); st.Leader != n9.Node || st.Term != 7 {
		t.Fatalf("after a late ELECTION: %+v, want n9 in term 7", st)
	}
	m.Step(now, Message{Type: MsgElection, From: n9.Node, To: cfg.Self.Node, Epoch: 7})
	if st := m.Status(); !st.Leader.IsZero() {
		t.Fatalf("after an ELECTION of the term: %+v, want no leader", st)
	}
}

// TestLateCoordinatorOfAResignedTermIsNotFollowed: a COORDINATOR (or an
// ANSWER naming the leader) of a term its leader has resigned arrives
// late, held back by the network: the follower does not follow the
// resigned term again; the same leader's later term it follows.
func TestLateCoordinatorOfAResignedTermIsNotFollowed(t *testing.T) {
	n9 := Member{Node: Node{ID: 9, Name: "n9"}, Eligible: true}
	m, cfg, now := newMachine(t, 2, "n2")
	m.SetMembers(now, []Member{cfg.Self, n9})
	coordinator := func(term uint64) {
		m.Step(now, Message{Type: MsgCoordinator, From: n9.Node, To: cfg.Self.Node, Leader: n9.Node, Term: term, Epoch: term})
	}
	coordinator(3)
	m.Step(now, Message{Type: MsgResign, From: n9.Node, To: cfg.Self.Node, Leader: n9.Node, Term: 3, Epoch: 3})
	coordinator(3)
	if st := m.Status(); !st.Leader.IsZero() {
		t.Fatalf("after a late COORDINATOR of the resigned term: %+v, want no leader", st)
	}
	coordinator(4)
	if st := m.Status(); st.Leader != n9.Node || st.Term != 4 {
		t.Fatalf("after n9's next term: %+v, want n9 in term 4", st)
	}
}

// TestLeaderHeardOnScheduleIsKept: gossip on a follower can hold a live
// leader as leaving for seconds (a member that left and came back under
// its old name, not listed alive since; the fault harness saw up to 5 s
// with the local timing, serf#662, gossip/leaving.go).
// A leader whose COORDINATORs keep coming on schedule is kept all that
// time, and no ELECTION goes out; when they stop, the leader is forgotten
// once the next is overdue (an announce interval and an election wait
// after the last), not sooner. Before, each COORDINATOR gave the leader
// CoordinatorTimeout, shorter than the announce interval with the LAN
// timing and equal to it with the local one, and the follower said "no
// leader" (and with the LAN timing campaigned) for the rest of every
// interval.
func TestLeaderHeardOnScheduleIsKept(t *testing.T) {
	local := func(c *Config) {
		c.ElectionTimeout, c.CoordinatorTimeout, c.AnnounceInterval = 200*time.Millisecond, time.Second, time.Second
	}
	for _, tc := range []struct {
		name   string
		adjust func(*Config)
	}{{"lan", func(*Config) {}}, {"local", local}} {
		t.Run(tc.name, func(t *testing.T) {
			m, cfg, now := newMachine(t, 2, "n2", tc.adjust)
			seed := testlog.Seed(t)
			r := rand.New(rand.NewPCG(seed, seed))
			n1, n9 := Member{Node: Node{ID: 1, Name: "n1"}, Eligible: true}, Member{Node: Node{ID: 9, Name: "n9"}, Eligible: true}
			m.SetMembers(now, []Member{cfg.Self, n1}) // n9 restarted, held as leaving
			announce := func(at time.Time) {
				m.Step(at, Message{Type: MsgCoordinator, From: n9.Node, To: cfg.Self.Node, Leader: n9.Node, Term: 3})
			}
			announce(now)
			m.Ready()
			// Announcements an interval apart, each arriving up to a
			// quarter of the election timeout late or early.
			next, last := now.Add(cfg.AnnounceInterval), now
			for at := now; at.Before(now.Add(20 * time.Second)); at = at.Add(10 * time.Millisecond) {
				if !at.Before(next) {
					announce(at)
					last = at
					skew := time.Duration(r.Int64N(int64(cfg.ElectionTimeout/2))) - cfg.ElectionTimeout/4
					next = next.Add(cfg.AnnounceInterval + skew)
				}
				m.Tick(at)
				if got := m.Status().Leader; got != n9.Node {
					t.Fatalf("%v after the start, %v after its last COORDINATOR: leader %v, want n9",
						at.Sub(now), at.Sub(last), got)
				}
				for _, msg := range m.Ready().Messages {
					t.Fatalf("%v after the start: sent %v while the leader announces on schedule", at.Sub(now), brief([]Message{msg}))
				}
			}
			due := last.Add(cfg.AnnounceInterval + cfg.ElectionTimeout)
			m.Tick(due.Add(-time.Millisecond))
			if got := m.Status().Leader; got != n9.Node {
				t.Fatalf("forgot the leader before its next COORDINATOR was overdue: leader %v", got)
			}
			m.Tick(due)
			if got := m.Status().Leader; !got.IsZero() {
				t.Fatalf("its COORDINATOR overdue and gossip not listing it: leader %v, want none", got)
			}
		})
	}
}
