package agent

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testlog"
	"github.com/tenurehq/tenure/leasing"
	"github.com/tenurehq/tenure/leasing/named"
)

// namedSim adds named leases to a core simulation: sessions on random
// nodes want a few names (waiting or trying once, as locks or as tasks),
// hold them a while and drop them. After every step it checks that no
// name has two valid holders (each judged on its own node's clock), and it
// checks that the tokens of a name's grants only grow.
type namedSim struct {
	names    []string
	session  uint64
	sessions map[string][]namedSession // by node
	last     map[string]uint64         // last token acquired, by name
	acquired int                       // grants seen, for the log
	revoked  []revoked                 // partitions to give back at the next step
}

// revoked is a partition the leader asked a session to give back.
type revoked struct {
	node    string
	boot    int
	name    string
	session uint64
}

type namedSession struct {
	name    string
	session uint64
	wait    bool
	boot    int // the node's boot it was made in: a restart forgets it
}

func newNamedSim(names ...string) *namedSim {
	return &namedSim{names: names, sessions: map[string][]namedSession{}, last: map[string]uint64{}}
}

// random makes one change: a new session on a running node, or the end of
// one.
func (ns *namedSim) random(s *csim) {
	node := s.order[s.rand.IntN(len(s.order))]
	n := s.nodes[node]
	if !n.up || n.paused {
		return
	}
	ns.forgetRestarted(n)
	now := s.local(n, s.now)
	if ss := ns.sessions[node]; len(ss) > 0 && s.rand.IntN(3) == 0 {
		i := s.rand.IntN(len(ss))
		n.c.namedDrop(now, ss[i].name, ss[i].session)
		ns.sessions[node] = append(ss[:i], ss[i+1:]...)
		s.collect(node)
		return
	}
	ns.session++
	sess := namedSession{name: ns.names[s.rand.IntN(len(ns.names))], session: ns.session, wait: s.rand.IntN(4) != 0, boot: n.boots}
	policy, group := named.FIFO, ""
	switch s.rand.IntN(3) {
	case 0:
		policy = named.Spread
	case 1: // a partition of group "grp"
		policy, group, sess.wait = named.Share, "grp", true
		sess.name = fmt.Sprintf("grp/%d", s.rand.IntN(4))
	}
	if err := n.c.namedWant(now, sess.name, sess.session, 2*s.ttl, sess.wait, policy, group); err != nil {
		s.t.Fatalf("%s: want %s: %v", node, sess.name, err)
	}
	ns.sessions[node] = append(ns.sessions[node], sess)
	s.collect(node)
}

// forgetRestarted drops the sessions of an earlier life of n.
func (ns *namedSim) forgetRestarted(n *cnode) {
	var keep []namedSession
	for _, x := range ns.sessions[n.name] {
		if x.boot == n.boots {
			keep = append(keep, x)
		}
	}
	ns.sessions[n.name] = keep
}

// collect checks what a node's sessions saw.
func (ns *namedSim) collect(s *csim, n *cnode) {
	for _, ev := range n.c.takeNamedEvents() {
		if ev.Kind == named.Revoked {
			ns.revoked = append(ns.revoked, revoked{node: n.name, boot: n.boots, name: ev.Name, session: ev.Session})
		}
		if ev.Kind != named.Acquired {
			continue
		}
		if ev.Token <= ns.last[ev.Name] {
			s.t.Fatalf("named: %s/%d acquired %q with token %#x after token %#x was acquired\n%s",
				n.name, ev.Session, ev.Name, ev.Token, ns.last[ev.Name], s.dump())
		}
		ns.last[ev.Name] = ev.Token
		ns.acquired++
	}
}

// step gives back the partitions the leader revoked, as a member does
// once it stopped using them, and asks for them again.
func (ns *namedSim) step(s *csim) {
	rs := ns.revoked
	ns.revoked = nil
	for _, r := range rs {
		n := s.nodes[r.node]
		if !n.up || n.paused || n.boots != r.boot {
			continue
		}
		now := s.local(n, s.now)
		n.c.namedDrop(now, r.name, r.session)
		ns.session++ // a new session, as a member's next lock session is
		if err := n.c.namedWant(now, r.name, ns.session, 2*s.ttl, true, named.Share, "grp"); err != nil {
			s.t.Fatalf("%s: want %s again: %v", r.node, r.name, err)
		}
		ns.sessions[r.node] = append(ns.sessions[r.node], namedSession{name: r.name, session: ns.session, wait: true, boot: n.boots})
		s.collect(r.node)
	}
}

// check asserts that no name has two valid holders at this instant.
func (ns *namedSim) check(s *csim) {
	holders := map[string][]string{}
	for _, name := range s.order {
		n := s.nodes[name]
		if n.c == nil || !n.up {
			continue // a crashed node's sessions are gone with it
		}
		for _, h := range n.c.named.claims.Holding(s.local(n, s.now)) {
			holders[h.Name] = append(holders[h.Name], fmt.Sprintf("%s/%d(token %#x)", name, h.Session, h.Token))
		}
	}
	for name, hs := range holders {
		if len(hs) > 1 {
			sort.Strings(hs)
			s.t.Fatalf("named I1: %q held by %v at once at %v\n%s", name, hs, s.now.Sub(s.start), s.dump())
		}
	}
}

// dump describes every node's claims and the leader's table.
func (ns *namedSim) dump(s *csim) string {
	var b strings.Builder
	for _, name := range s.order {
		n := s.nodes[name]
		if !n.up {
			continue
		}
		now := s.local(n, s.now)
		leader, term := n.c.named.claims.Leader()
		fmt.Fprintf(&b, "  %s claims (to %s term %d): holding %v waiting %v\n", name, leader.Name, term, n.c.named.claims.Holding(now), n.c.named.claims.Waiting())
		if t := n.c.namedTable(now); t != nil {
			fmt.Fprintf(&b, "  %s table term %d grace ends in %v: %+v\n", name, t.Term(), t.GraceEnd().Sub(now), t.List(now))
		}
	}
	return b.String()
}

// checkServed asserts liveness once the cluster has healed and a leader
// leads: every name some running node linked to the leader waits for is
// held by someone within the bound (the new leader's grace, then a
// grant). Who is linked is judged against the node that leads at each
// instant: when the final phase leaves a node's peer links cut but for
// one, that node may lead when the check starts and lose the lead to a
// higher node that cannot hear it, and its waits can then reach no
// leader.
func (ns *namedSim) checkServed(s *csim, bound time.Duration) {
	linked := func(a, b string) bool {
		return a == b || s.reach(a, b) && s.reach(b, a) && !s.peerCut[[2]string{a, b}] && !s.peerCut[[2]string{b, a}]
	}
	wanted := func(leader string) map[string]bool {
		w := map[string]bool{}
		if leader == "" {
			return w // not served until a leader leads (the loop below)
		}
		for _, node := range s.order {
			n := s.nodes[node]
			if !n.up || n.paused || !linked(node, leader) {
				continue
			}
			for _, c := range n.c.named.claims.Waiting() {
				w[c.Name] = true // a try-once claim is refused and gone by now
			}
		}
		return w
	}
	served := func(want map[string]bool) bool {
		held := map[string]bool{}
		for _, name := range s.order {
			n := s.nodes[name]
			if n.up {
				for _, h := range n.c.named.claims.Holding(s.local(n, s.now)) {
					held[h.Name] = true
				}
			}
		}
		for name := range want {
			if !held[name] {
				return false
			}
		}
		return true
	}
	for end := s.now.Add(bound); ; s.tick() {
		leader := s.leader()
		want := wanted(leader)
		if leader != "" && served(want) {
			return
		}
		if !s.now.Before(end) {
			s.t.Fatalf("named: waiters for %v not served within %v of healing\n%s%s", want, bound, s.dump(), ns.dump(s))
		}
	}
}

// dbLock is a three-node cluster's leader, a follower holding "db"
// (session 1, token tok) and another waiting for it (session 2).
type dbLock struct {
	leader, holder, waiter string
	tok                    uint64
}

// holdAndWait starts three nodes, has one follower acquire "db" and then
// another wait for it.
func holdAndWait(t *testing.T, s *csim) dbLock {
	t.Helper()
	s.named = newNamedSim("db")
	s.addNodes(3)
	l, _ := s.waitLeader(10 * time.Second)
	d := dbLock{leader: l}
	for _, name := range s.order {
		if name != l && d.holder == "" {
			d.holder = name
		} else if name != l {
			d.waiter = name
		}
	}
	hn, wn := s.nodes[d.holder], s.nodes[d.waiter]
	if err := hn.c.namedWant(s.local(hn, s.now), "db", 1, 2*s.ttl, true, named.FIFO, ""); err != nil {
		t.Fatal(err)
	}
	s.collect(d.holder)
	s.run(3*s.ttl + time.Second) // the first leader's grace, then the grant
	tok, _, ok := hn.c.named.claims.Valid(s.local(hn, s.now), "db", 1)
	if !ok {
		t.Fatalf("%s did not acquire db\n%s", d.holder, s.dump())
	}
	d.tok = tok
	if err := wn.c.namedWant(s.local(wn, s.now), "db", 2, 2*s.ttl, true, named.FIFO, ""); err != nil {
		t.Fatal(err)
	}
	s.collect(d.waiter)
	return d
}

// holds fails the test unless the holder still holds db with its token
// (when is what happened since it acquired it).
func (d dbLock) holds(t *testing.T, s *csim, when string) {
	t.Helper()
	hn := s.nodes[d.holder]
	if got, _, ok := hn.c.named.claims.Valid(s.local(hn, s.now), "db", 1); !ok || got != d.tok {
		t.Fatalf("%s %s holds db: %v, token %#x, want token %#x\n%s%s", when, d.holder, ok, got, d.tok, s.dump(), s.named.dump(s))
	}
	wn := s.nodes[d.waiter]
	if _, _, ok := wn.c.named.claims.Valid(s.local(wn, s.now), "db", 2); ok {
		t.Fatalf("%s the waiter %s holds db too", when, d.waiter)
	}
}

// handOff has the holder drop db and checks that the waiter then gets it,
// with a higher token.
func (d dbLock) handOff(t *testing.T, s *csim) {
	t.Helper()
	hn, wn := s.nodes[d.holder], s.nodes[d.waiter]
	hn.c.namedDrop(s.local(hn, s.now), "db", 1)
	s.collect(d.holder)
	s.run(500 * time.Millisecond)
	if got, _, ok := wn.c.named.claims.Valid(s.local(wn, s.now), "db", 2); !ok || got <= d.tok {
		t.Fatalf("after the release the waiter %s holds db: %v, token %#x (the first was %#x)\n%s%s", d.waiter, ok, got, d.tok, s.dump(), s.named.dump(s))
	}
}

// TestNamedLeasesAcrossFailover: a lock held across a crash of the leader
// stays with its holder (re-claimed from the new leader), and a waiter
// gets it when the holder drops it.
func TestNamedLeasesAcrossFailover(t *testing.T) {
	s := newCsim(t, 7)
	d := holdAndWait(t, s)
	s.crash(d.leader)
	s.run(4 * s.ttl)
	d.holds(t, s, "after the leader's crash")
	d.handOff(t, s)
}

// TestNamedTableOutlivesALapseTheTermSurvives: a leader frozen with a
// renewal round in flight wakes a moment past its lease deadline, before
// it has ticked. The first message it then reads is a holder's named
// request, with the lease not valid; the voters' grants to the renewal,
// read next, extend the same term's lease (they were given before its
// deadline, so the term never ended). The leader must serve the names of
// that term from the table it kept: it dropped the table at the lapse and
// then led on with none, refusing every named request for the rest of the
// term (random schedule 614,156).
func TestNamedTableOutlivesALapseTheTermSurvives(t *testing.T) {
	s := newCsim(t, testlog.Seed(t))
	d := holdAndWait(t, s)
	l, ln := d.leader, s.nodes[d.leader]
	s.run(200 * time.Millisecond)

	// Freeze the leader just after it sends a renewal round; hold every
	// message to it until it wakes.
	for rd := ln.c.rounds.current; rd == nil || rd.Kind != leasing.Renew; rd = ln.c.rounds.current {
		s.tick()
	}
	epoch, deadline, table := ln.c.lease.epoch, ln.c.lease.deadline, ln.c.named.table
	if table == nil {
		t.Fatalf("leader %s has no named table\n%s", l, s.dump())
	}
	ln.paused = true
	s.slowIf = func(f flight) time.Duration {
		if f.to == l {
			return time.Hour
		}
		return 0
	}
	for !s.local(ln, s.now.Add(s.step)).After(deadline) {
		s.tick()
	}
	// Wake it at the next step, past its deadline on its own clock: its
	// held named requests are read first, then the renewal's grants.
	var nameds, others []flight
	for _, f := range s.queue {
		if f.to != l {
			others = append(others, f)
			continue
		}
		f.at = s.now.Add(s.step)
		if f.env.Named != nil {
			nameds = append(nameds, f)
		} else {
			others = append(others, f)
		}
	}
	if len(nameds) == 0 {
		t.Fatalf("no named request to %s was held while it was frozen", l)
	}
	s.queue = append(nameds, others...)
	s.slowIf = nil
	ln.paused = false
	s.tick()

	now := s.local(ln, s.now)
	if ln.c.lease.epoch != epoch || !ln.c.leaseValid(now) {
		t.Fatalf("the scenario did not happen: %s leads epoch %d (valid %v), want epoch %d revived by its renewal's grants\n%s",
			l, ln.c.lease.epoch, ln.c.leaseValid(now), epoch, s.dump())
	}
	if ln.c.namedTable(now) != table {
		t.Fatalf("%s leads term %d on, but not with the table it had before the lapse\n%s%s", l, epoch, s.dump(), s.named.dump(s))
	}
	s.run(2 * s.ttl)
	d.holds(t, s, "after the lapse")
	d.handOff(t, s)
	if ln.c.lease.epoch != epoch {
		t.Fatalf("the term changed during the test (epoch %d, was %d): the rest shows nothing of the lapse", ln.c.lease.epoch, epoch)
	}
}
