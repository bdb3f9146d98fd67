package agent

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/leasing"
)

// csim runs whole-node cores (election, lease, voter, roster) on a fake
// clock and an in-memory network that can delay, reorder, drop and cut
// links one way. Each node's clock runs at its own rate. After every step it
// checks the invariants (see check).
type csim struct {
	t       *testing.T
	rand    *rand.Rand
	start   time.Time
	now     time.Time // global (real) time
	step    time.Duration
	nodes   map[string]*cnode
	order   []string
	cut     map[[2]string]bool
	drop    float64
	queue   []flight
	ttl     time.Duration
	initial int // nodes bootstrapped together by addNodes

	terms map[uint64]string // epoch → the node that led it
}

type cnode struct {
	name    string
	id      uint64
	rate    float64 // clock rate
	offset  time.Duration
	voter   bool
	c       *core
	up      bool
	paused  bool
	left    bool // left gracefully: others see it as left
	wiped   bool // lost its disk once
	epochs  *memStore
	grants  *memStore
	rosters *memRoster
	led     []uint64 // epochs of the terms it led, in order
	granted uint64   // highest acquire epoch it granted (checked: grows)
}

type flight struct {
	from, to string
	env      envelope
	at       time.Time
	reply    bool
}

type memStore struct{ epoch uint64 }

func (m *memStore) Epoch() uint64 { return m.epoch }
func (m *memStore) Raise(e uint64) error {
	m.epoch = max(m.epoch, e)
	return nil
}

type memRoster struct{ r leasing.Roster }

func (m *memRoster) Roster() leasing.Roster      { return m.r }
func (m *memRoster) Save(r leasing.Roster) error { m.r = r; return nil }

func newCsim(t *testing.T, seed uint64) *csim {
	return &csim{
		t:     t,
		rand:  rand.New(rand.NewPCG(seed, seed*7+1)),
		start: time.Unix(10000, 0),
		now:   time.Unix(10000, 0),
		step:  10 * time.Millisecond,
		nodes: map[string]*cnode{},
		cut:   map[[2]string]bool{},
		ttl:   2 * time.Second,
		terms: map[uint64]string{},
	}
}

// local is node n's clock at global time t: its own rate, its own offset.
func (s *csim) local(n *cnode, t time.Time) time.Time {
	return s.start.Add(n.offset + time.Duration(float64(t.Sub(s.start))*n.rate))
}

// addNodes adds n1..nN (IDs 1..N), voters bootstrapping a roster of all N,
// with clock rates spread within the drift bound.
func (s *csim) addNodes(n int) {
	s.initial = n
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("n%d", i)
		rate := 1 + (s.rand.Float64()-0.5)*0.0099 // |rate_i − rate_j| < 1%
		s.nodes[name] = &cnode{name: name, id: uint64(i), rate: rate, voter: true,
			offset: time.Duration(s.rand.IntN(1000)) * time.Hour,
			epochs: &memStore{}, grants: &memStore{}, rosters: &memRoster{}}
		s.order = append(s.order, name)
	}
	for _, name := range s.order {
		s.boot(name, n)
	}
}

func (s *csim) config(n *cnode, expect int) coreConfig {
	e := LocalElection()
	e.Rand = rand.New(rand.NewPCG(s.rand.Uint64(), s.rand.Uint64()))
	e.Preempt = true
	lt := leasing.DefaultTiming().WithTTL(s.ttl)
	return coreConfig{Self: bully.Node{ID: n.id, Name: n.name}, Eligible: true, Voter: n.voter,
		Consistency: Quorum, Lease: lt, Expect: expect, Election: e}
}

// boot (re)starts a node from its stores.
func (s *csim) boot(name string, expect int) {
	n := s.nodes[name]
	c, err := newCore(s.config(n, expect), n.epochs, n.grants, n.rosters, slog.New(slog.DiscardHandler), s.local(n, s.now))
	if err != nil {
		s.t.Fatal(err)
	}
	n.c, n.up, n.paused = c, true, false
	s.syncViews()
}

func (s *csim) crash(name string) { s.nodes[name].up = false; s.syncViews() }

// wipe loses a node's disk. The per-voter record of grants goes with it:
// what must survive a minority of lost disks is that no two terms share an
// epoch (recordTerm), not a forgetful voter's own sequence.
func (s *csim) wipe(name string) {
	n := s.nodes[name]
	n.epochs, n.grants, n.rosters = &memStore{}, &memStore{}, &memRoster{}
	n.granted, n.wiped = 0, true
}

func (s *csim) reach(a, b string) bool {
	na, nb := s.nodes[a], s.nodes[b]
	return na.up && nb.up && !s.cut[[2]string{a, b}]
}

func (s *csim) partition(a, b []string) {
	for _, x := range a {
		for _, y := range b {
			s.cut[[2]string{x, y}], s.cut[[2]string{y, x}] = true, true
		}
	}
	s.syncViews()
}

func (s *csim) cutOneWay(from, to string) { s.cut[[2]string{from, to}] = true; s.syncViews() }

func (s *csim) heal() { s.cut = map[[2]string]bool{}; s.syncViews() }

// syncViews gives every running node the nodes it can reach both ways.
func (s *csim) syncViews() {
	for _, a := range s.order {
		na := s.nodes[a]
		if !na.up || na.paused {
			continue
		}
		var view []memberView
		for _, b := range s.order {
			nb := s.nodes[b]
			if a == b || (s.reach(a, b) && s.reach(b, a) && !nb.paused) { // a paused node fails its probes
				view = append(view, memberView{Member: bully.Member{Node: bully.Node{ID: nb.id, Name: b}, Eligible: true},
					Voter: nb.voter, Cluster: nb.rosters.r.ClusterID, RosterVersion: nb.rosters.r.Version, Expect: nb.c.cfg.Expect})
			} else if nb.left {
				view = append(view, memberView{Member: bully.Member{Node: bully.Node{ID: nb.id, Name: b}}, Left: true})
			}
		}
		na.c.setMembers(s.local(na, s.now), view)
		s.collect(a)
	}
}

// collect queues a node's outgoing messages with random delays.
func (s *csim) collect(name string) {
	n := s.nodes[name]
	if n.c.failed != nil {
		s.t.Fatalf("%s: %v", name, n.c.failed)
	}
	for _, m := range n.c.ready() {
		s.queue = append(s.queue, flight{from: name, to: m.to.Name, env: m.env, at: s.now.Add(s.delay())})
	}
	s.recordTerm(n)
}

func (s *csim) delay() time.Duration { return time.Duration(1+s.rand.IntN(30)) * time.Millisecond }

func (s *csim) recordTerm(n *cnode) {
	st := n.c.m.Status()
	if st.State != bully.StateLeader {
		return
	}
	if len(n.led) > 0 && n.led[len(n.led)-1] == st.Term {
		return
	}
	if len(n.led) > 0 && st.Term <= n.led[len(n.led)-1] {
		s.t.Fatalf("I2: %s leads term %d after term %d", n.name, st.Term, n.led[len(n.led)-1])
	}
	if other, ok := s.terms[st.Term]; ok && other != n.name {
		s.t.Fatalf("I2: epoch %d led by both %s and %s", st.Term, other, n.name)
	}
	s.terms[st.Term] = n.name
	n.led = append(n.led, st.Term)
}

// tick advances one step: deliver what is due, tick every running node, and
// check the invariants.
func (s *csim) tick() {
	s.now = s.now.Add(s.step)
	var later []flight
	due := s.queue
	s.queue = nil
	for _, f := range due {
		if f.at.After(s.now) {
			later = append(later, f)
			continue
		}
		s.deliver(f)
	}
	s.queue = append(later, s.queue...)
	for _, name := range s.order {
		if n := s.nodes[name]; n.up && !n.paused {
			n.c.tick(s.local(n, s.now))
			s.collect(name)
		}
	}
	s.check()
}

func (s *csim) deliver(f flight) {
	to := s.nodes[f.to]
	if !s.reach(f.from, f.to) || to.paused || (s.drop > 0 && s.rand.Float64() < s.drop) {
		return
	}
	reply := to.c.receive(s.local(to, s.now), f.env)
	s.noteGrant(to, f.env, reply)
	s.collect(f.to)
	if reply != nil && !f.reply {
		s.queue = append(s.queue, flight{from: f.to, to: f.from, env: *reply, at: s.now.Add(s.delay()), reply: true})
	}
}

// noteGrant checks that a voter never grants an acquire at or below an
// epoch it granted before.
func (s *csim) noteGrant(v *cnode, req envelope, reply *envelope) {
	if req.Lease == nil || req.Lease.Kind != leasing.Acquire || reply == nil || reply.LeaseReply == nil || !reply.LeaseReply.Granted {
		return
	}
	if req.Lease.Epoch <= v.granted {
		s.t.Fatalf("I2: voter %s granted epoch %d after granting %d", v.name, req.Lease.Epoch, v.granted)
	}
	v.granted = req.Lease.Epoch
}

// check asserts I1 (at most one node believes it holds a valid lease) and I3
// (a node that believes so is backed, right now, by unexpired promises of a
// majority of voters, each on its own clock; a voter that is down, has no
// roster, or holds after a restart or a lost disk counts as promised, since
// it grants to nobody).
func (s *csim) check() {
	var holders []string
	for _, name := range s.order {
		n := s.nodes[name]
		if n.up && n.c.leaseValid(s.local(n, s.now)) {
			holders = append(holders, name)
			s.checkBacked(n)
		}
	}
	if len(holders) > 1 {
		s.t.Fatalf("I1: %v all hold valid leases at %v\n%s", holders, s.now.Sub(s.start), s.dump())
	}
}

func (s *csim) checkBacked(l *cnode) {
	r := l.c.lease.roster // the roster its lease was granted under
	backed := map[string]bool{}
	for _, v := range r.Members() {
		n := s.nodes[v.Name]
		now := s.local(n, s.now)
		switch {
		case !n.up, n.c.grants == nil, n.c.roster().IsZero():
			backed[v.Name] = true // down, or knows no roster: grants to nobody
		case n.c.amnesiac && now.Before(n.c.holdEnd):
			backed[v.Name] = true
		case n.c.grants.HoldsPromiseFor(now, leasing.Node{ID: l.id, Name: l.name}):
			backed[v.Name] = true
		case n.c.grants.Holding(now):
			backed[v.Name] = true // restarted and holding
		}
	}
	if !r.Satisfied(func(v leasing.Node) bool { return backed[v.Name] }) {
		s.t.Fatalf("I3: %s believes it leads, but only %v back it under %v\n%s", l.name, backed, r, s.dump())
	}
}

func (s *csim) run(d time.Duration) {
	for end := s.now.Add(d); s.now.Before(end); {
		s.tick()
	}
}

// leader returns the node holding a valid lease, or "".
func (s *csim) leader() string {
	for _, name := range s.order {
		n := s.nodes[name]
		if n.up && n.c.leaseValid(s.local(n, s.now)) {
			return name
		}
	}
	return ""
}

// waitLeader runs until some node in among leads, or fails after d.
func (s *csim) waitLeader(d time.Duration, among ...string) (string, time.Duration) {
	s.t.Helper()
	l, took, ok := s.tryLeader(d, among...)
	if !ok {
		s.t.Fatalf("no leader among %v within %v\n%s", among, d, s.dump())
	}
	return l, took
}

// tryLeader runs until some node in among leads, for at most d.
func (s *csim) tryLeader(d time.Duration, among ...string) (string, time.Duration, bool) {
	begin := s.now
	for end := s.now.Add(d); s.now.Before(end); s.tick() {
		if l := s.leader(); l != "" && (len(among) == 0 || contains(among, l)) {
			return l, s.now.Sub(begin), true
		}
	}
	return "", 0, false
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func (s *csim) dump() string {
	var b strings.Builder
	for _, name := range s.order {
		n := s.nodes[name]
		if !n.up {
			fmt.Fprintf(&b, "  %s down left=%v\n", name, n.left)
			continue
		}
		st := n.c.m.Status()
		fmt.Fprintf(&b, "  %s state=%v leader=%q term=%d epoch=%d lease=%d valid=%v noquorum=%q roster=%v left=%v\n", name, st.State,
			st.Leader.Name, st.Term, st.Epoch, n.c.lease.epoch, n.c.leaseValid(s.local(n, s.now)), n.c.noQuorum, n.rosters.r, n.left)
	}
	cuts := []string{}
	for k := range s.cut {
		cuts = append(cuts, k[0]+">"+k[1])
	}
	sort.Strings(cuts)
	fmt.Fprintf(&b, "  cut: %v\n", cuts)
	return b.String()
}
