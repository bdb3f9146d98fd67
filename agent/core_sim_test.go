package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
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
	t       testing.TB
	rand    *rand.Rand
	start   time.Time
	now     time.Time // global (real) time
	step    time.Duration
	nodes   map[string]*cnode
	order   []string
	cut     map[[2]string]bool // gossip and peer messages cut (a→b)
	peerCut map[[2]string]bool // peer messages only: gossip still sees both
	hidden  map[[2]string]bool // gossip does not list b to a yet; peer messages flow
	// leaving, when set, has random nodes' gossip hold other live nodes
	// as leaving (hidden) until the time given (randomLeaving).
	leaving        map[[2]string]time.Time
	leavingLeaders int // how often a view held the leader leaving
	drop           float64
	slow           float64 // share of messages delayed up to two TTLs
	// lag, when its upper bound is set, replaces the usual 1–30 ms delay
	// with one drawn from [lag[0], lag[1]]: a loaded host.
	lag [2]time.Duration
	// lan runs the nodes with the LAN profile's election timings (the
	// Local profile's otherwise).
	lan   bool
	dup   float64 // share of messages delivered twice
	queue []flight
	// held are the messages that reached a frozen node: its kernel holds
	// them on the TCP connection until the process wakes (releaseHeld).
	held []heldFlight
	// unacked are the messages a cut link stopped: the sender's kernel
	// retransmits them until the link heals or the call is abandoned
	// (retransmit).
	unacked []retransmission
	ttl     time.Duration
	initial int // nodes bootstrapped together by addNodes

	// minDetection is the election's MinDetection (zero: gossip's reports
	// of failures are believed at once). Views change here the moment a
	// node crashes, faster than gossip can tell: a leader that crashed
	// less than minDetection after its last COORDINATOR is forgotten when
	// the next is overdue.
	minDetection time.Duration

	// The voter-set rules: --voters (0: the bootstrap's), and how long a
	// voter may be missing before the leader replaces it (0: never).
	voters      int
	deadTimeout time.Duration
	zoned       bool // new nodes get random zones

	cutOff string            // the node finalPhase cut off from all peers but one
	dropIf func(flight) bool // drops the messages a scenario picks
	// slowIf adds its delay to the messages a scenario picks.
	slowIf func(flight) time.Duration
	// alter changes a message as it is sent (unrelayed strips releases).
	alter func(*flight)

	// lateSteps is the share of a leader's roster steps (RosterUpdate
	// requests) delayed up to three TTLs, so that many arrive after the
	// term that proposed them ended; late counts what became of them.
	lateSteps float64
	late      lateStepCount

	// eagerRelease replays the old driver: a term's release leaves as soon
	// as the core asks, before its tenure run child has stopped.
	eagerRelease bool

	terms map[uint64]string // epoch → the node that led it

	named *namedSim // named leases' sessions and checks, when set
}

type cnode struct {
	name  string
	id    uint64
	rate  float64   // clock rate since gbase
	lbase time.Time // the node's clock at global time gbase
	gbase time.Time
	ttl   time.Duration // its --lease-ttl
	voter bool
	zone  string // its --zone
	// promise is the last promise its voter was seen to hold (holder and
	// expiry on its clock). It survives restarts and lost disks, as the
	// promise does in the world outside the node: I3 is checked against
	// it, not against the node's own idea of its startup hold.
	promise struct {
		holder string
		node   leasing.Node // the holder
		epoch  uint64
		until  time.Time
		life   int // the boot in which it was given
	}
	boots      int            // how often it has started
	instance   uint64         // its agent process's, as its data dir names it
	advertised leasing.Roster // the roster its gossip tags name
	run        runner         // its tenure run supervisor
	c          *core
	ticks      driverTicks // when the driver ticks its core
	up         bool
	paused     bool
	left       bool // left gracefully: others see it as left
	wiped      bool // lost its disk once
	epochs     *memStore
	grants     *memStore
	rosters    *memRoster
	pledges    *memRoster
	led        []uint64 // epochs of the terms it led, in order
	// storageDown: its writes fail, and its agent advertises it (not
	// eligible) in gossip.
	storageDown bool
	granted     uint64 // highest acquire epoch it granted (checked: grows)
	drained     bool   // core_drain_sim_test.go
	// yieldChecked is the highest term whose hand-over checkYield checked,
	// and passedAll whether the last askSuccessor passed over as many
	// nodes as the agent does (core_preempt_sim_test.go).
	yieldChecked uint64
	passedAll    bool
}

type flight struct {
	from, to string
	env      envelope
	at       time.Time
	reply    bool
	sent     time.Time // when the call a reply answers went out
	// retried says a cut held the call's request or its answer, which
	// TCP then retransmitted: the caller's transport reports it
	// (gossip.Transport.CallRetried: the socket's count of
	// retransmissions rose, the request's too when the answer was held,
	// as the acknowledgement of the request was held with it), and the
	// answer is no round-trip sample.
	retried bool
}

// heldFlight is a message held for a frozen node, in the boot it reached.
type heldFlight struct {
	flight
	boot int
}

// retransmission is a message a cut link stopped, as TCP retransmits it:
// the first retry a minimum RTO (200 ms on Linux) after the first send,
// each next one twice as long after the last.
type retransmission struct {
	flight
	boots [2]int // the sender's and the receiver's, when it was sent
	next  time.Time
	rto   time.Duration
}

// minRTO is Linux's minimum TCP retransmission timeout.
const minRTO = 200 * time.Millisecond

// errDisk is a failed write of a simulated disk.
var errDisk = errors.New("simulated disk failure")

type memStore struct {
	epoch   uint64
	longest time.Duration
	failed  bool // the disk fails every write from now on
}

func (m *memStore) Epoch() uint64             { return m.epoch }
func (m *memStore) LongestTTL() time.Duration { return m.longest }
func (m *memStore) Raise(e uint64) error      { return m.Record(e, 0) }
func (m *memStore) Record(e uint64, ttl time.Duration) error {
	if (e > m.epoch || ttl > m.longest) && m.failed {
		return errDisk
	}
	m.epoch, m.longest = max(m.epoch, e), max(m.longest, ttl)
	return nil
}

type memRoster struct{ r leasing.Roster }

func (m *memRoster) Roster() leasing.Roster      { return m.r }
func (m *memRoster) Save(r leasing.Roster) error { m.r = r; return nil }

// runner is a tenure run supervisor: it starts the node's command while the
// node leads with more than grace left, and stops it when the term ends or
// the lease gets within grace of its end; stopping takes the child's
// SIGTERM handler up to grace (then it is killed).
type runner struct {
	grace   time.Duration
	term    uint64
	running bool
	stopAt  time.Time // global time its child will have stopped; zero when not stopping
}

func newCsim(t testing.TB, seed uint64) *csim {
	return &csim{
		t:       t,
		rand:    rand.New(rand.NewPCG(seed, seed*7+1)),
		start:   time.Unix(10000, 0),
		now:     time.Unix(10000, 0),
		step:    10 * time.Millisecond,
		nodes:   map[string]*cnode{},
		cut:     map[[2]string]bool{},
		peerCut: map[[2]string]bool{},
		hidden:  map[[2]string]bool{},
		ttl:     2 * time.Second,
		terms:   map[uint64]string{},
	}
}

// local is node n's clock at global time t: its own rate since gbase.
func (s *csim) local(n *cnode, t time.Time) time.Time {
	return n.lbase.Add(time.Duration(float64(t.Sub(n.gbase)) * n.rate))
}

// global is the global time at which node n's clock reads t.
func (s *csim) global(n *cnode, t time.Time) time.Time {
	return n.gbase.Add(time.Duration(float64(t.Sub(n.lbase)) / n.rate))
}

// driftRate is a clock rate such that any two differ by less than 1%.
func (s *csim) driftRate() float64 { return 1 + (s.rand.Float64()-0.5)*0.0099 }

// setRate changes n's clock rate from now on (its clock stays continuous).
func (s *csim) setRate(n *cnode, rate float64) {
	n.lbase, n.gbase, n.rate = s.local(n, s.now), s.now, rate
}

// newNode makes a node with a random clock rate and offset, the
// simulation's TTL, and a tenure run grace of an eighth of it.
func (s *csim) newNode(name string, id uint64) *cnode {
	n := &cnode{name: name, id: id, rate: s.driftRate(), voter: true, ttl: s.ttl,
		gbase: s.now, lbase: s.now.Add(time.Duration(s.rand.IntN(1000)) * time.Hour),
		epochs: &memStore{}, grants: &memStore{}, rosters: &memRoster{}, pledges: &memRoster{}}
	n.run.grace = s.ttl / 8
	return n
}

// addNodes adds n1..nN (IDs 1..N), voters bootstrapping a roster of all N,
// with clock rates spread within the drift bound.
func (s *csim) addNodes(n int) { s.addNodesWith(n, nil) }

// addNodesWith is addNodes with each node adjusted by set before it boots.
func (s *csim) addNodesWith(n int, set func(i int, nd *cnode)) {
	s.initial = n
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("n%d", i)
		s.nodes[name] = s.newNode(name, uint64(i))
		if set != nil {
			set(i, s.nodes[name])
		}
		s.order = append(s.order, name)
	}
	for _, name := range s.order {
		s.boot(name, n)
	}
}

func (s *csim) config(n *cnode, expect int) coreConfig {
	e := LocalElection()
	if s.lan {
		e = bully.DefaultConfig()
	}
	e.Rand = rand.New(rand.NewPCG(s.rand.Uint64(), s.rand.Uint64()))
	e.Preempt = true
	e.MinDetection = s.minDetection
	lt := leasing.DefaultTiming().WithTTL(n.ttl)
	lt.AcquireBudget = min(lt.AcquireBudget, e.CoordinatorTimeout/2) // as Config.leaseTiming
	return coreConfig{Self: bully.Node{ID: n.id, Name: n.name}, Eligible: !n.drained, Voter: n.voter,
		Consistency: Quorum, Lease: lt, Expect: expect, Election: e,
		Voters: s.voters, Zone: n.zone, DeadVoterTimeout: s.deadTimeout, IdleTick: localIdleTick}
}

// boot (re)starts a node from its stores.
func (s *csim) boot(name string, expect int) { s.bootTogether(expect, name) }

// bootTogether (re)starts the named nodes at the same instant, before any
// of them sees the others: gossip views form only afterwards.
func (s *csim) bootTogether(expect int, names ...string) {
	for _, name := range names {
		s.startCore(name, expect)
	}
	s.syncViews()
}

// startCore makes a node's core from its stores; a failing disk keeps it down.
func (s *csim) startCore(name string, expect int) {
	n := s.nodes[name]
	// A failing store is a failing disk: the probe fails too. (n.epochs
	// and n.grants change when the disk is lost, so it reads them late.)
	probe := func() error {
		if n.epochs.failed || n.grants.failed {
			return errDisk
		}
		return nil
	}
	st := coreStores{epochs: n.epochs, grants: n.grants, rosters: n.rosters, pledges: n.pledges, probe: probe}
	cfg := s.config(n, expect)
	// Its agent process: a new instance each boot, after the previous
	// one unless the disk was lost since (Agent.openInstance). Not drawn
	// from s.rand, so that every recorded seed keeps its schedule.
	cfg.Previous = n.instance
	cfg.Instance = n.id<<32 | uint64(n.boots+1)
	c, err := newCore(cfg, st, s.logger(name), s.local(n, s.now))
	if errors.Is(err, errDisk) {
		n.up = false // the agent refuses to start on a failing disk
		return
	}
	if err != nil {
		s.t.Fatal(err)
	}
	n.c, n.up, n.paused = c, true, false
	n.instance = cfg.Instance
	n.boots++
}

// logger discards a node's logs, unless TENURE_SIM_LOG names the node
// (to read one node's story when a schedule fails).
func (s *csim) logger(name string) *slog.Logger {
	if os.Getenv("TENURE_SIM_LOG") != name {
		return slog.New(slog.DiscardHandler)
	}
	// Stamp lines with the simulation's time, not the wall clock's, so
	// the logs of separate runs (one per node) line up.
	opts := &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey && len(groups) == 0 {
			return slog.String("sim", fmt.Sprintf("%09.3f", s.now.Sub(s.start).Seconds()))
		}
		return a
	}}
	return slog.New(slog.NewTextHandler(os.Stderr, opts)).With("node", name)
}

// trace prints a step of a schedule, stamped with the simulation's time,
// when TENURE_SIM_TRACE is set (with TENURE_SIM_LOG, to read a failing
// schedule's story).
func (s *csim) trace(format string, args ...any) {
	if os.Getenv("TENURE_SIM_TRACE") != "" {
		fmt.Fprintf(os.Stderr, "sim=%09.3f step: %s\n", s.now.Sub(s.start).Seconds(), fmt.Sprintf(format, args...))
	}
}

// crash stops a node at once. Its tenure run supervisor loses the agent and
// stops the command (within its grace).
func (s *csim) crash(name string) {
	n := s.nodes[name]
	n.up = false
	s.stopRunner(n)
	s.syncViews()
}

// wipe loses a node's disk. The per-voter record of grants goes with it:
// what must survive a minority of lost disks is that no two terms share an
// epoch (recordTerm), not a forgetful voter's own sequence.
func (s *csim) wipe(name string) {
	n := s.nodes[name]
	n.epochs, n.grants, n.rosters, n.pledges = &memStore{}, &memStore{}, &memRoster{}, &memRoster{}
	n.granted, n.wiped, n.instance = 0, true, 0
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

func (s *csim) heal() {
	s.cut, s.peerCut = map[[2]string]bool{}, map[[2]string]bool{}
	s.syncViews()
}

// cutPeers cuts the peer messages between a and b (both ways unless
// oneWay) while gossip still lists both as alive: memberlist's indirect
// probes get through where the direct TCP connection does not.
func (s *csim) cutPeers(a, b string, oneWay bool) {
	s.peerCut[[2]string{a, b}] = true
	if !oneWay {
		s.peerCut[[2]string{b, a}] = true
	}
}

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
			if a == b || (s.reach(a, b) && s.reach(b, a) && !nb.paused && !s.hidden[[2]string{a, b}]) { // a paused node fails its probes
				view = append(view, memberView{Member: bully.Member{Node: bully.Node{ID: nb.id, Name: b}, Eligible: !nb.drained && !nb.storageDown},
					Voter: nb.voter, Cluster: nb.rosters.r.ClusterID, RosterVersion: nb.rosters.r.Version, RosterEpoch: nb.rosters.r.Epoch, RosterEpochKnown: true, Expect: nb.c.cfg.Expect,
					Seated: nb.rosters.r.Contains(leasing.Node{ID: nb.id, Name: b}),
					Zone:   nb.zone})
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
	if err := n.c.storageFailure(); err != nil && !errors.Is(err, errDisk) {
		s.t.Fatalf("%s: %v", name, err)
	}
	if down := n.c.storageFailure() != nil; down != n.storageDown {
		// The agent advertises it in gossip (Agent.noteStorage).
		n.storageDown = down
		defer s.syncViews()
	}
	if e, ok := n.c.stopPending(); ok && s.eagerRelease {
		n.c.stopped(s.local(n, s.now), e)
	}
	s.checkYields(n) // core_preempt_sim_test.go
	for _, m := range n.c.ready() {
		s.send(flight{from: name, to: m.to.Name, env: m.env, sent: s.now})
	}
	n.c.dispatched(s.local(n, s.now))
	s.notePromise(n)
	s.recordTerm(n)
	if s.named != nil {
		s.named.collect(s, n)
	}
	if r := n.rosters.r; r.ClusterID != n.advertised.ClusterID || r.Version != n.advertised.Version {
		s.checkJointCommitted(n, n.advertised, r)
		n.advertised = r // gossip spreads the new tags, as serf does
		s.syncViews()
	}
	if to, ok := n.c.takePreemptAsk(); ok {
		s.answerPreempt(n, to) // core_preempt_sim_test.go
	}
	if n.c.takeDiskStepDown() {
		s.askSuccessor(n) // as the agent does (Agent.stepDownForDisk)
		n.c.stepDownForDisk(s.local(n, s.now))
		s.collect(name)
	}
}

// checkJointCommitted checks the roster rule of joint consensus: a leader
// moves from a joint roster to a later one only once a majority of both of
// the joint roster's sets stored it (or something later).
func (s *csim) checkJointCommitted(n *cnode, from, to leasing.Roster) {
	if !from.Joint() || !to.Newer(from) || !n.c.leading() {
		return
	}
	stored := func(v leasing.Node) bool {
		r := s.nodes[v.Name].rosters.r
		return r.ClusterID == from.ClusterID && !from.Newer(r)
	}
	if !from.Satisfied(stored) {
		s.t.Fatalf("roster rule: leader %s moved from joint %v to %v before a majority of both sets stored the joint\n%s", n.name, from, to, s.dump())
	}
}

// send queues f with a random delay, sometimes twice.
func (s *csim) send(f flight) {
	if s.alter != nil {
		s.alter(&f)
	}
	f.at = s.now.Add(s.delay())
	if s.lateSteps > 0 && f.env.RosterUpdate != nil && !f.reply && s.rand.Float64() < s.lateSteps {
		f.at = s.now.Add(time.Duration(1 + s.rand.Int64N(int64(3*s.ttl))))
	}
	if s.slowIf != nil {
		f.at = f.at.Add(s.slowIf(f))
	}
	s.queue = append(s.queue, f)
	if s.dup > 0 && s.rand.Float64() < s.dup {
		f.at = s.now.Add(s.delay())
		s.queue = append(s.queue, f)
	}
}

// unrelayed is an alter that takes the release off from's RESIGNs, as a
// peer of the version before relayed releases sent them: its successor
// can only campaign against voters its release has not reached yet.
func unrelayed(from string) func(*flight) {
	return func(f *flight) {
		if b := f.env.Bully; f.from == from && b != nil && b.Type == bully.MsgResign {
			f.env.Released = nil
		}
	}
}

// delay is a message's delay: mostly 1–30 ms, sometimes up to two TTLs.
func (s *csim) delay() time.Duration {
	if s.slow > 0 && s.rand.Float64() < s.slow {
		return time.Duration(1 + s.rand.Int64N(int64(2*s.ttl)))
	}
	if lo, hi := s.lag[0], s.lag[1]; hi > 0 {
		return lo + time.Duration(s.rand.Int64N(int64(hi-lo)+1))
	}
	return time.Duration(1+s.rand.IntN(30)) * time.Millisecond
}

// notePromise records the promise n's voter holds now, if it is new.
func (s *csim) notePromise(n *cnode) {
	if n.c.grants == nil || !n.up {
		return
	}
	now := s.local(n, s.now)
	h, until, ok := n.c.grants.Promise(now)
	// A release and a new promise in one step: an acquire relaying its
	// predecessor's release (leasing.Request.Relayed).
	released := n.promise.life == n.boots && n.promise.epoch > 0 &&
		n.c.grants.LastRelease(n.promise.node) >= n.promise.epoch
	switch {
	case ok && h.Name != n.promise.holder && n.promise.holder != "" && now.Before(n.promise.until) && !released:
		s.t.Fatalf("voter %s promised %s while its promise to %s (given %d boots ago) runs for %v more\n%s",
			n.name, h.Name, n.promise.holder, n.boots-n.promise.life, n.promise.until.Sub(now), s.dump())
	case ok:
		n.promise.holder, n.promise.node, n.promise.until, n.promise.life = h.Name, h, until, n.boots
		n.promise.epoch = n.c.grants.Standing(now).Epoch
	case n.promise.life == n.boots:
		// Released by its holder in this life of the voter: gone. A
		// promise forgotten by a restart or a lost disk is not.
		n.promise.holder = ""
	}
}
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

// driverTicks models how the driver ticks a core (Agent.nextTick) for
// tests that step time by hand: every step while the core is not quiet,
// every idle tick of the local profile while it is.
type driverTicks struct{ wake time.Time }

// localIdleTick is the local profile's idle tick: idleTickFactor ticks.
var localIdleTick = idleTickFactor * Config{Profile: Local}.withDefaults().TickInterval

// due reports whether the driver ticks c at global time at (local: c's
// clock then); if so, it counts the tick.
func (d *driverTicks) due(at, local time.Time, c *core) bool {
	if at.Before(d.wake) && c.quiet(local, localIdleTick) {
		return false
	}
	d.wake = at.Add(localIdleTick)
	return true
}

// tick advances one step: deliver what is due, tick every running node, and
// check the invariants.
func (s *csim) tick() {
	s.now = s.now.Add(s.step)
	if len(s.held) > 0 {
		s.releaseHeld()
	}
	if len(s.unacked) > 0 {
		s.retransmit()
	}
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
		n := s.nodes[name]
		if !n.up || n.paused {
			continue
		}
		now := s.local(n, s.now)
		if !n.ticks.due(s.now, now, n.c) {
			continue // the driver sleeps through a quiet core's ticks
		}
		n.c.tick(now)
		s.collect(name)
	}
	for _, name := range s.order {
		s.supervise(s.nodes[name])
	}
	if s.named != nil {
		s.named.step(s)
	}
	s.check()
}

// supervise runs n's tenure run supervisor for one step: it reads the
// node's status (as the real one does over the socket), starts the command
// for a term it leads with more than grace left, stops it otherwise, and
// tells the agent once a stopped term's command is gone.
func (s *csim) supervise(n *cnode) {
	r := &n.run
	if !r.stopAt.IsZero() {
		if s.now.Before(r.stopAt) {
			return
		}
		r.running, r.stopAt = false, time.Time{}
	}
	lead := false
	if n.up {
		now := s.local(n, s.now)
		lead = n.c.leaseValid(now) && n.c.leaseRemaining(now) > r.grace
	}
	switch {
	case r.running && (!lead || n.c.lease.epoch != r.term):
		s.stopRunner(n)
	case !r.running && lead:
		r.running, r.term = true, n.c.lease.epoch
	case !r.running && n.up && !n.paused:
		if e, ok := n.c.stopPending(); ok {
			n.c.stopped(s.local(n, s.now), e)
			s.collect(n.name)
		}
	}
}

// stopRunner starts stopping n's command: its SIGTERM handler takes a
// random time up to the grace, after which it would be killed.
func (s *csim) stopRunner(n *cnode) {
	if r := &n.run; r.running && r.stopAt.IsZero() {
		r.stopAt = s.now.Add(time.Duration(1 + s.rand.Int64N(int64(r.grace))))
	}
}

// linked reports whether a peer message from a reaches b now, loss aside:
// both running, no cut of the link (gossip's or the peer transport's), b
// not frozen.
func (s *csim) linked(a, b string) bool {
	return s.wired(a, b) && !s.nodes[b].paused
}

// wired reports whether a peer message from a reaches b's kernel now,
// loss aside: both running, no cut of the link (gossip's or the peer
// transport's). A frozen b holds it until it wakes (releaseHeld).
func (s *csim) wired(a, b string) bool {
	return s.reach(a, b) && !s.peerCut[[2]string{a, b}]
}

func (s *csim) deliver(f flight) {
	to := s.nodes[f.to]
	if to.paused && s.wired(f.from, f.to) {
		// A frozen process's kernel still takes the message on the
		// connection; the process reads it when it wakes.
		s.held = append(s.held, heldFlight{flight: f, boot: to.boots})
		return
	}
	if from := s.nodes[f.from]; from.up && to.up && !s.linked(f.from, f.to) {
		// Cut (both ends run): the sender's kernel retransmits it.
		s.unacked = append(s.unacked, retransmission{flight: f, boots: [2]int{from.boots, to.boots}, next: s.now.Add(minRTO), rto: minRTO})
		return
	}
	if !s.linked(f.from, f.to) || (s.drop > 0 && s.rand.Float64() < s.drop) ||
		(s.dropIf != nil && s.dropIf(f)) {
		return
	}
	s.receive(f)
}

// retransmit resends the messages cut links stopped, as TCP does: at each
// retry whose link is whole again the message gets through (to a frozen
// receiver's kernel, which holds it). Once its sender gave up on the call
// (heldFor) it is dropped: TCP may still deliver it, but the serving
// agent refuses it as late, or the caller drops the answer. So is one
// whose sender or receiver restarted (its connection went with it).
func (s *csim) retransmit() {
	var keep []retransmission
	for _, r := range s.unacked {
		from, to := s.nodes[r.from], s.nodes[r.to]
		switch {
		case !from.up || !to.up || from.boots != r.boots[0] || to.boots != r.boots[1] || s.now.Sub(r.sent) >= s.heldFor(r.flight):
		case s.now.Before(r.next):
			keep = append(keep, r)
		case to.paused && s.wired(r.from, r.to):
			r.retried = true
			s.held = append(s.held, heldFlight{flight: r.flight, boot: to.boots})
		case s.linked(r.from, r.to):
			if s.dropIf == nil || !s.dropIf(r.flight) {
				r.retried = true
				s.receive(r.flight)
			}
		default:
			r.rto *= 2
			r.next = r.next.Add(r.rto)
			keep = append(keep, r)
		}
	}
	s.unacked = keep
}

// releaseHeld hands the nodes that woke the messages their kernels held
// while they were frozen, those whose senders still wait for the answer
// (heldFor): the serving agent refuses a request whose caller's deadline
// passed (gossip.Transport stamps requests with it), and a caller drops
// an answer that comes after its call gave up. A node that crashed
// meanwhile lost them with its connections.
func (s *csim) releaseHeld() {
	var keep []heldFlight
	for _, h := range s.held {
		to := s.nodes[h.to]
		switch {
		case to.paused && to.up && to.boots == h.boot:
			keep = append(keep, h)
		case to.up && to.boots == h.boot && s.now.Sub(h.sent) < s.heldFor(h.flight) &&
			(s.dropIf == nil || !s.dropIf(h.flight)):
			s.receive(h.flight)
		}
	}
	s.held = keep
}

// heldFor is how long the sender of f waits for its answer, as the agent
// bounds the call (Agent.send): a renewal for its lease's validity, an
// announcement for announceTimeout, anything else for sendTimeout. For an
// answer, the call it answers: a lease answer is taken for a renewal's
// (an acquire's answer after its round is handled as late).
func (s *csim) heldFor(f flight) time.Duration {
	switch {
	case f.reply && f.env.LeaseReply != nil:
		return max(sendTimeout, s.nodes[f.to].c.cfg.Lease.Validity())
	case f.reply:
		return sendTimeout
	case f.env.Lease != nil && f.env.Lease.Kind == leasing.Renew:
		return max(sendTimeout, s.nodes[f.from].c.cfg.Lease.Validity())
	case f.env.Bully != nil && f.env.Bully.Type == bully.MsgCoordinator:
		return announceTimeout
	}
	return sendTimeout
}

// receive hands f to its receiver and sends the answer back.
func (s *csim) receive(f flight) {
	to := s.nodes[f.to]
	now := s.local(to, s.now)
	if f.reply {
		// As the driver does: the call was answered (a sample of the
		// round trip), then the reply, unless empty, is received.
		took := now.Sub(s.local(to, f.sent))
		to.c.peerReplied(now, bully.Node{ID: s.nodes[f.from].id, Name: f.from}, took, f.retried || f.env.frozeWithin(took))
		if f.env.bare() {
			s.collect(f.to)
			return
		}
	}
	noteStep := s.lateStep(f)
	reply := to.c.receive(now, f.env)
	noteStep(reply)
	s.noteGrant(to, f.env, reply)
	s.collect(f.to)
	if !f.reply && to.up {
		if reply == nil {
			reply = &envelope{} // every call is answered, if only to say it arrived
		}
		to.c.stampWake(now, reply)
		s.send(flight{from: f.to, to: f.from, env: *reply, reply: true, sent: f.sent, retried: f.retried})
	}
}

// lateStepCount counts roster steps delivered after the term that
// proposed them ended (its proposer no longer leads it), those of them the
// receiver stored, and those stored after a later term had begun.
type lateStepCount struct{ delivered, stored, afterLater int }

// lateStep notes a roster step f brings late, when the schedule delays
// steps (lateSteps); the func it returns notes whether the receiver
// stored it.
func (s *csim) lateStep(f flight) func(reply *envelope) {
	u, from, to := f.env.RosterUpdate, s.nodes[f.from], s.nodes[f.to]
	if s.lateSteps == 0 || u == nil || f.reply || (from.up && from.c.leading() && from.c.lease.epoch == u.Term) {
		return func(*envelope) {}
	}
	s.late.delivered++
	before := to.rosters.r
	return func(reply *envelope) {
		if reply == nil || reply.RosterAck == nil || !reply.RosterAck.OK || !u.Roster.Newer(before) {
			return
		}
		s.late.stored++
		for e := range s.terms {
			if e > u.Term {
				s.late.afterLater++
				s.trace("%s stored %s's step %v of term %d after term %d began", f.to, f.from, u.Roster, u.Term, e)
				return
			}
		}
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
	var running []string
	for _, name := range s.order {
		if r := s.nodes[name].run; r.running {
			running = append(running, fmt.Sprintf("%s(term %d)", name, r.term))
		}
	}
	if len(running) > 1 {
		s.t.Fatalf("tenure run: commands of %v run at once at %v\n%s", running, s.now.Sub(s.start), s.dump())
	}
	if s.named != nil {
		s.named.check(s)
	}
}

// checkBacked checks I3 against the promises the voters gave, as the world
// outside each node knows them: a voter backs l while the last promise it
// was seen to give is to l and has not run out on its clock, whether or not
// it has since crashed, restarted or lost its disk. A voter's restart hold
// is not trusted: if it fails, the voter's next promise shows it.
func (s *csim) checkBacked(l *cnode) {
	r := l.c.lease.roster // the roster its lease was granted under
	backed := map[string]bool{}
	for _, v := range r.Members() {
		n := s.nodes[v.Name]
		backed[v.Name] = n.promise.holder == l.name && s.local(n, s.now).Before(n.promise.until)
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

// othersThan returns every node but x, in order.
func (s *csim) othersThan(x string) []string {
	return slices.DeleteFunc(slices.Clone(s.order), func(name string) bool { return name == x })
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
		fmt.Fprintf(&b, "  %s state=%v leader=%q term=%d epoch=%d lease=%d valid=%v noquorum=%q roster=%v left=%v disk-failing=%v\n", name, st.State,
			st.Leader.Name, st.Term, st.Epoch, n.c.lease.epoch, n.c.leaseValid(s.local(n, s.now)), n.c.rounds.noQuorum, n.rosters.r, n.left, n.storageDown)
	}
	cuts := []string{}
	for k := range s.cut {
		cuts = append(cuts, k[0]+">"+k[1])
	}
	sort.Strings(cuts)
	var peerCuts []string
	for k := range s.peerCut {
		peerCuts = append(peerCuts, k[0]+">"+k[1])
	}
	sort.Strings(peerCuts)
	fmt.Fprintf(&b, "  cut: %v peer-only: %v\n", cuts, peerCuts)
	return b.String()
}

// fakeT records the first failure of a schedule that is expected to fail
// (a replay of old, broken behaviour), and stops it there.
type fakeT struct {
	testing.TB
	name   string
	failed bool
	msg    string
}

func (f *fakeT) Name() string { return f.name }

func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	panic(f)
}

func (f *fakeT) Fatal(args ...any)   { f.Fatalf("%s", fmt.Sprint(args...)) }
func (f *fakeT) Failed() bool        { return f.failed }
func (f *fakeT) Logf(string, ...any) {}
func (f *fakeT) Helper()             {}
