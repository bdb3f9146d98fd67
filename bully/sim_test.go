package bully

import (
	"fmt"
	"github.com/tenurehq/tenure/internal/testlog"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"
)

// sim is an in-memory cluster of Machines on a fake clock. Messages take one
// step (10ms) to arrive; the network can drop messages and cut links in
// either direction. Membership views are an oracle: each up node sees the up
// nodes it can reach both ways, except nodes whose view is frozen. Lease
// rounds are granted at once (available mode).
type sim struct {
	t     *testing.T
	rand  *rand.Rand
	now   time.Time
	step  time.Duration
	nodes map[string]*simNode
	cut   map[[2]string]bool
	drop  float64 // probability of losing a message
	queue []Message
	trace []Message // every delivered message
	sent  []Message // every message sent, delivered or not
	base  func(Member) Config
	// confirm, if set, answers a leader's Ready.Preempt as its driver
	// would (Config.ConfirmPreempt): whether to can take the term, and
	// whether the answer came at all.
	confirm func(leader, to Node) (canTake, answered bool)
}

type simNode struct {
	member    Member
	m         *Machine
	up        bool
	frozen    bool     // membership view not refreshed
	mute      bool     // sends and receives nothing, but gossip lists it (a frozen process)
	persisted uint64   // the "disk"
	terms     []term   // terms led, in order
	seen      []term   // terms followed or led, in order of adoption
	ended     []string // why each term it released ended (Ready.Why)
}

type term struct {
	leader Node
	epoch  uint64
}

func newSim(t *testing.T, preempt bool) *sim {
	seed := testlog.Seed(t)
	s := &sim{
		t:     t,
		rand:  rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		now:   time.Unix(1000, 0),
		step:  10 * time.Millisecond,
		nodes: map[string]*simNode{},
		cut:   map[[2]string]bool{},
	}
	s.base = func(self Member) Config {
		c := DefaultConfig()
		c.Self = self
		c.Preempt = preempt
		c.Rand = rand.New(rand.NewPCG(s.rand.Uint64(), s.rand.Uint64()))
		return c
	}
	return s
}

func (s *sim) add(name string, id uint64, eligible bool) *simNode {
	n := &simNode{member: Member{Node: Node{ID: id, Name: name}, Eligible: eligible}}
	s.nodes[name] = n
	s.start(name)
	return n
}

// start (re)starts a node from its persisted epoch. The terms it followed
// are forgotten (only the epoch is on disk); the terms it led are kept, so a
// restarted node must still lead only with later epochs.
func (s *sim) start(name string) {
	n := s.nodes[name]
	n.seen = nil
	cfg := s.base(n.member)
	cfg.Epoch = n.persisted
	m, err := New(cfg, s.now)
	if err != nil {
		s.t.Fatalf("new %s: %v", name, err)
	}
	n.m, n.up, n.frozen = m, true, false
	s.syncViews()
}

func (s *sim) crash(name string) {
	s.nodes[name].up = false
	s.syncViews()
}

func (s *sim) names() []string {
	var out []string
	for name := range s.nodes {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

func (s *sim) reachable(a, b string) bool {
	return s.nodes[a].up && s.nodes[b].up && !s.cut[[2]string{a, b}]
}

// partition cuts every link between the two groups, both ways.
func (s *sim) partition(a, b []string) {
	for _, x := range a {
		for _, y := range b {
			s.cut[[2]string{x, y}] = true
			s.cut[[2]string{y, x}] = true
		}
	}
	s.syncViews()
}

func (s *sim) heal() {
	s.cut = map[[2]string]bool{}
	s.syncViews()
}

// syncViews gives every up, unfrozen node the members it can reach both ways.
func (s *sim) syncViews() {
	for _, a := range s.names() {
		n := s.nodes[a]
		if !n.up || n.frozen {
			continue
		}
		var view []Member
		for _, b := range s.names() {
			if a == b || (s.reachable(a, b) && s.reachable(b, a)) {
				view = append(view, s.nodes[b].member)
			}
		}
		n.m.SetMembers(s.now, view)
		s.flush(a)
	}
}

// flush takes a node's Ready: persist first, then queue messages, then run
// the (instant) lease round.
func (s *sim) flush(name string) {
	n := s.nodes[name]
	for {
		rd := n.m.Ready()
		if rd.Epoch < n.persisted {
			s.t.Fatalf("%s: epoch went back from %d to %d", name, n.persisted, rd.Epoch)
		}
		n.persisted = rd.Epoch
		if rd.Release != 0 {
			if rd.Why == "" {
				s.t.Fatalf("%s: term %d released with no reason given", name, rd.Release)
			}
			n.ended = append(n.ended, rd.Why)
		}
		s.queue = append(s.queue, rd.Messages...)
		s.sent = append(s.sent, rd.Messages...)
		if !rd.Preempt.IsZero() && s.confirm != nil {
			if canTake, answered := s.confirm(n.member.Node, rd.Preempt); answered {
				n.m.PreemptAnswered(s.now, rd.Preempt, canTake)
				continue
			}
		}
		if rd.Acquire == 0 {
			break
		}
		if rd.Acquire > n.persisted {
			s.t.Fatalf("%s: acquire epoch %d above persisted %d", name, rd.Acquire, n.persisted)
		}
		n.m.Acquired(s.now, rd.Acquire)
	}
	s.record(n)
}

// record notes a node's term changes and checks they only grow.
func (s *sim) record(n *simNode) {
	st := n.m.Status()
	if st.State == StateLeader {
		cur := term{n.member.Node, st.Term}
		if len(n.terms) == 0 || n.terms[len(n.terms)-1] != cur {
			if len(n.terms) > 0 && cur.epoch <= n.terms[len(n.terms)-1].epoch {
				s.t.Fatalf("%s leads term %d after term %d", n.member.Name, cur.epoch, n.terms[len(n.terms)-1].epoch)
			}
			n.terms = append(n.terms, cur)
		}
	}
	if st.Leader.IsZero() {
		return
	}
	cur := term{st.Leader, st.Term}
	if len(n.seen) > 0 {
		last := n.seen[len(n.seen)-1]
		if last == cur {
			return
		}
		if cur.epoch <= last.epoch {
			s.t.Fatalf("%s: followed %s term %d after %s term %d", n.member.Name,
				cur.leader.Name, cur.epoch, last.leader.Name, last.epoch)
		}
	}
	n.seen = append(n.seen, cur)
}

// tick advances one step: deliver queued messages, then tick every machine.
func (s *sim) tick() {
	s.now = s.now.Add(s.step)
	q := s.queue
	s.queue = nil
	for _, msg := range q {
		s.deliver(msg)
	}
	for _, name := range s.names() {
		if n := s.nodes[name]; n.up {
			n.m.Tick(s.now)
			s.flush(name)
		}
	}
}

func (s *sim) deliver(msg Message) {
	from, to := msg.From.Name, msg.To.Name
	if !s.reachable(from, to) || s.nodes[from].mute || s.nodes[to].mute || (s.drop > 0 && s.rand.Float64() < s.drop) {
		return
	}
	s.trace = append(s.trace, msg)
	reply := s.nodes[to].m.Step(s.now, msg)
	s.flush(to)
	if reply != nil {
		s.queue = append(s.queue, *reply)
	}
}

func (s *sim) run(d time.Duration) {
	for end := s.now.Add(d); s.now.Before(end); {
		s.tick()
	}
}

// leaders returns the names of the up nodes in state leader.
func (s *sim) leaders() []string {
	var out []string
	for _, name := range s.names() {
		if n := s.nodes[name]; n.up && n.m.Status().State == StateLeader {
			out = append(out, name)
		}
	}
	return out
}

// agree checks that every listed node follows leader with one shared term
// and returns that term.
func (s *sim) agree(leader string, names ...string) uint64 {
	s.t.Helper()
	want := s.nodes[leader].m.Status()
	if want.State != StateLeader {
		s.t.Fatalf("%s is %v, want leader\n%s", leader, want.State, s.dump())
	}
	for _, name := range names {
		st := s.nodes[name].m.Status()
		if st.Leader.Name != leader || st.Term != want.Term {
			s.t.Fatalf("%s follows %q term %d, want %s term %d\n%s", name, st.Leader.Name, st.Term, leader, want.Term, s.dump())
		}
	}
	return want.Term
}

func (s *sim) dump() string {
	var b strings.Builder
	for _, name := range s.names() {
		n := s.nodes[name]
		st := n.m.Status()
		fmt.Fprintf(&b, "  %s up=%v state=%v leader=%q term=%d epoch=%d\n", name, n.up, st.State, st.Leader.Name, st.Term, st.Epoch)
	}
	return b.String()
}

// startCluster adds nodes n1..nN with IDs 1..N, all eligible.
func (s *sim) startCluster(n int) []string {
	var names []string
	for i := 1; i <= n; i++ {
		names = append(names, fmt.Sprintf("n%d", i))
		s.add(names[i-1], uint64(i), true)
	}
	return names
}
