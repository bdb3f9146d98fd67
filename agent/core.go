package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/leasing"
	"github.com/tenurehq/tenure/leasing/named"
)

// core is the deterministic heart of an agent: the election machine, the
// lease (as candidate and leader), the voter and the roster. Every input
// carries the instant from the node's own clock; outputs (messages to send)
// are collected by ready. Its only I/O is through its stores, which persist
// before anything that depends on them is sent. The driver (loop.go) runs it
// over real sockets; core_sim_test.go runs many of them on a fake network.
type core struct {
	cfg coreConfig
	log *slog.Logger
	m   *bully.Machine // the election
	out []outMsg       // messages to send (ready)

	// What this node stores, and whether its data dir takes writes.
	epochs  epochStore
	rosters rosterStore
	pledges rosterStore // the roster this node pledged to bootstrap
	granted leasing.GrantStore
	disk    diskHealth // core_storage.go

	// As a voter.
	grants  *leasing.Voter // nil unless this node votes
	amnesia amnesia        // it may have forgotten its grants (core_amnesia.go)

	// What it knows of the others.
	live   map[string]memberView // live members, self included
	left   map[string]bool       // members gossip reports as having left
	reach  reach                 // whether the peer transport reaches a majority
	watch  leaseWatch            // the natural successor's watch of the leader's lease
	ticked time.Time             // the last tick, to tell a freeze of this node (ownFreeze)
	woke   time.Time             // the first tick after this node's last freeze
	peers  peerBook              // peer addresses and failures, for reasons (core_reasons.go)
	rtt    roundTrips            // how long peers take to answer, for the election
	jumps  jumpReport            // refused epoch jumps, for the log

	// As candidate and leader.
	rounds rounds // core_lease.go
	lease  struct {
		epoch    uint64    // the term being led; 0 when none
		acting   bool      // the machine led the term (it may have acted)
		deadline time.Time // end of validity on this node's clock
		renewAt  time.Time
		roster   leasing.Roster // the roster of the last won round
	}
	stopping *pendingStop // a term ended whose release waits for local work to stop
	preempt  bully.Node   // a higher node to ask before yielding to it (core_preempt.go)
	relay    relayed      // a resigned leader's release, relayed with acquires
	named    namedLeases  // core_named.go

	// The roster: bootstrapping it, learning it, and (as leader) changing it.
	boot bootstrap // pledges being collected (--expect)
	// seenCluster: this node has seen a member of an established cluster,
	// so it never bootstraps one of its own.
	seenCluster bool
	fetch       rosterFetch          // core_roster.go
	steps       rosterSteps          // core_change.go
	forced      map[string]time.Time // voters force-left (by an operator, or leaving), and when
	seats       seats                // what the leader tracks to manage the voter set (core_voters.go)

	traced bully.State     // the election state traceState last logged
	warned map[string]bool // conditions reported once, by key
}

// coreConfig is what a core needs from the agent's Config.
type coreConfig struct {
	Self        bully.Node
	Eligible    bool
	Voter       bool
	Consistency Consistency
	Lease       leasing.Timing
	Expect      int
	Election    bully.Config // timings, Preempt and Rand; Self and Epoch are filled in
	// Voters is the number of voters to aim for (0: the roster's Seats,
	// else defaultSeats); Zone this node's failure domain.
	Voters int
	Zone   string
	// DeadVoterTimeout is how long a voter may be missing from gossip
	// before the leader replaces it (0: never).
	DeadVoterTimeout time.Duration
	// PromoteAfter is how long a node must be alive before it is promoted
	// (0: maxTTLFactor lease TTLs).
	PromoteAfter time.Duration
	// IdleTick is the longest the driver leaves a running core unticked
	// (idleTickFactor ticks): a longer gap is a freeze of this node
	// (ownFreeze).
	IdleTick time.Duration
	// Instance and Previous name this agent process and the one that ran
	// on its data dir before it (leasing.Request.Instance).
	Instance, Previous uint64
	// Count, if set, is told of each lease event by name, for metrics:
	// "lease.acquired", "lease.acquire_failed", "lease.renewed",
	// "lease.renew_failed", "lease.expired".
	Count func(event string)
}

// epochStore persists the highest epoch seen or used.
type epochStore interface {
	Epoch() uint64
	Raise(uint64) error
}

// rosterStore persists the roster.
type rosterStore interface {
	Roster() leasing.Roster
	Save(leasing.Roster) error
}

// memberView is a member as the core sees it.
type memberView struct {
	bully.Member
	Voter         bool
	Cluster       string // the cluster ID it advertises, "" before it has a roster
	RosterVersion uint64 // the roster version it advertises
	// RosterEpoch is the term of the roster step it advertises, known
	// (RosterEpochKnown) from agents that advertise it: two leaders may
	// propose competing steps of one version, the later term's winning.
	RosterEpoch      uint64
	RosterEpochKnown bool
	Seated           bool   // it is a voter of the roster it advertises
	Expect           int    // the --expect it was started with (0: none)
	Zone             string // its failure domain (--zone)
	Left             bool   // it left gracefully (not live)
	PeerAddr         string // its peer transport address as gossip advertises it, "" when unknown
}

// newerRoster reports whether mv advertises a later roster step than r:
// a later version, or a later term's step of r's version.
func (mv memberView) newerRoster(r leasing.Roster) bool {
	return mv.RosterVersion > r.Version || (mv.RosterVersion == r.Version && mv.RosterEpochKnown && mv.RosterEpoch > r.Epoch)
}

// olderRoster reports whether mv advertises an earlier roster step than r:
// an earlier version, or an earlier term's step of r's version.
func (mv memberView) olderRoster(r leasing.Roster) bool {
	return mv.RosterVersion < r.Version || (mv.RosterVersion == r.Version && mv.RosterEpochKnown && mv.RosterEpoch < r.Epoch)
}

// outMsg is a message to send to a peer.
type outMsg struct {
	to  bully.Node
	env envelope
}

// coreStores are a core's persisted state: the highest epoch seen, the
// voter's grants, the roster, and the roster pledged at bootstrap.
type coreStores struct {
	epochs  epochStore
	grants  leasing.GrantStore
	rosters rosterStore
	pledges rosterStore
	// probe writes to the data dir, to learn whether it takes writes
	// again after one failed (retryStorage); nil: rewriting the epoch
	// file is the only check.
	probe func() error
}

func newCore(cfg coreConfig, st coreStores, log *slog.Logger, now time.Time) (*core, error) {
	epochs, grants := st.epochs, st.grants
	// The epoch file may have been lost or lowered; the voter file says
	// which epochs this node granted, so it has seen them.
	if err := epochs.Raise(grants.Epoch()); err != nil {
		return nil, fmt.Errorf("agent: persist epoch: %w", err)
	}
	ec := cfg.Election
	ec.Self = bully.Member{Node: cfg.Self, Eligible: cfg.Eligible}
	ec.Epoch = epochs.Epoch()
	ec.TransferWindow = transferWindow(cfg)
	ec.ConfirmPreempt = true // the driver asks the claimant (core_preempt.go)
	m, err := bully.New(ec, now)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if cfg.Consistency == Quorum {
		m.SetReach(false, false) // no claim before a probe proves a majority
	}
	c := &core{cfg: cfg, log: log, m: m, epochs: epochs, granted: grants, rosters: st.rosters, pledges: st.pledges, disk: diskHealth{probe: st.probe},
		live: map[string]memberView{}, warned: map[string]bool{}, left: map[string]bool{}, forced: map[string]time.Time{},
		seats: newSeats(), named: namedLeases{claims: named.NewClaims(toLeasing(cfg.Self), cfg.Lease.MaxDrift)}}
	if cfg.Voter && cfg.Consistency == Quorum {
		named := c.roster().Contains(toLeasing(cfg.Self))
		c.grants = leasing.NewVoter(toLeasing(cfg.Self), grants, now,
			leasing.VoterConfig{TTL: cfg.Lease.TTL, MaxTTL: c.maxTTL(), Restarted: named})
		if named && grants.Epoch() == 0 && grants.LongestTTL() == 0 {
			// Named in its roster but with no record of any grant: its voter
			// file was lost (or it never granted). Either way it must learn
			// its floor before it votes.
			c.becomeAmnesiac(now, "the roster names this node but its voter file records no grant")
		}
	}
	return c, nil
}

// maxTTLFactor bounds the TTL a voter accepts: up to this many times its
// own. Nodes may run different --lease-ttl values during a rolling change
// within that ratio.
const maxTTLFactor = 3

// count tells cfg.Count of a lease event.
func (c *core) count(event string) {
	if c.cfg.Count != nil {
		c.cfg.Count(event)
	}
}

// maxTTL is the longest TTL this node's voter accepts, and so the longest
// promise it can ever have given under this configuration.
func (c *core) maxTTL() time.Duration { return maxTTLFactor * c.cfg.Lease.TTL }

// ready returns and clears the messages to send.
func (c *core) ready() []outMsg {
	out := c.out
	c.out = nil
	return out
}

func (c *core) roster() leasing.Roster { return c.rosters.Roster() }

func (c *core) quorumMode() bool { return c.cfg.Consistency == Quorum }

// setMembers replaces the membership: live members, and those that left
// gracefully (Left). Members of another cluster are left out of the
// election (and reported once).
func (c *core) setMembers(now time.Time, members []memberView) {
	c.live = map[string]memberView{}
	c.left = map[string]bool{}
	c.peers.learnAddrs(members, c.roster())
	var view []bully.Member
	mine := c.roster().ClusterID
	for _, mv := range members {
		if mv.Left {
			c.left[mv.Name] = true
			continue
		}
		if mine != "" && mv.Cluster != "" && mv.Cluster != mine {
			c.warnForeign(mv, mine)
			continue
		}
		c.live[mv.Name] = mv
		view = append(view, mv.Member)
	}
	c.m.SetMembers(now, view)
	c.trackMembers(now)
	c.maybeBootstrap(now)
	c.process(now)
	c.dropGoneWaiters(now)
}

func (c *core) warnForeign(mv memberView, mine string) {
	if c.warned[mv.Name] {
		return
	}
	c.warned[mv.Name] = true
	c.log.Error("refusing to merge with a member of another cluster: it was bootstrapped separately; its rosters and leases are ignored",
		"member", mv.Name, "its_cluster", mv.Cluster, "this_cluster", mine)
}

// tick advances timers: the election's, the lease deadline, renewals, the
// budget of a round in flight, and roster fetches.
func (c *core) tick(now time.Time) {
	c.probeReach(now)
	c.watchLease(now)
	c.m.SetRoundTrip(c.rtt.timeout(now))
	c.m.Tick(now)
	c.queryFloors(now)
	if err := c.recover(now); err != nil && !c.warned["recover"] {
		c.warned["recover"] = true // it retries every tick; once is enough
		c.log.Error("cannot vote again", "err", err)
	}
	c.checkLease(now)
	c.probeCandidates(now)
	c.driveRoster(now)
	c.askPledges(now)
	c.maybeFetchRoster(now)
	c.retryStorage(now)
	c.process(now)
	c.driveNamed(now)
}

// resign makes a leader step down; bully.ErrNotLeader otherwise.
func (c *core) resign(now time.Time) error {
	err := c.m.ResignWith(now, bully.Handover{Natural: true})
	c.process(now)
	return err
}

// receive handles a peer message and returns the reply to send back on the
// same exchange, if any.
func (c *core) receive(now time.Time, env envelope) *envelope {
	var reply *envelope
	switch {
	case env.Bully != nil:
		c.receiveRelease(now, *env.Bully, env.Released)
		c.noteAnnouncement(now, *env.Bully)
		if r := c.m.Step(now, *env.Bully); r != nil {
			reply = &envelope{Bully: r}
		}
	case env.Lease != nil:
		rep := c.vote(now, *env.Lease)
		reply = &envelope{LeaseReply: &rep}
	case env.LeaseReply != nil:
		c.addReply(now, *env.LeaseReply)
	case env.RosterFetch:
		if r := c.roster(); !r.IsZero() {
			reply = &envelope{Roster: &r}
			if st := c.m.Status(); !st.Leader.IsZero() {
				reply.Follows = &followed{Leader: st.Leader, Term: st.Term}
			}
		}
	case env.Roster != nil:
		c.adoptRoster(now, *env.Roster)
		if f := env.Follows; f != nil && c.roster().ClusterID == env.Roster.ClusterID {
			// A node that fetches the roster has just joined: it learns
			// the leader now, not once the leader has heard of the join.
			c.m.Relayed(now, f.Leader, f.Term)
		}
	case env.RosterUpdate != nil:
		ack := c.onRosterUpdate(now, *env.RosterUpdate)
		reply = &envelope{RosterAck: &ack}
	case env.RosterAck != nil:
		c.onRosterAck(now, *env.RosterAck)
	case env.ForceLeave != "":
		reply = &envelope{ForceLeaveReply: c.forceLeaveReply(now, env.ForceLeave)}
	case env.Pledge != nil:
		rep := c.onPledge(now, *env.Pledge)
		reply = &envelope{PledgeReply: &rep}
	case env.PledgeReply != nil:
		c.onPledgeReply(now, *env.PledgeReply)
	case env.FloorQuery:
		reply = &envelope{Floor: c.answerFloor(now)}
	case env.Floor != nil:
		c.noteReply(env.Floor.From)
		c.noteReadiness(now, *env.Floor)
		c.noteSighting(now, *env.Floor)
		if c.amnesia.active && c.roster().Contains(toLeasing(env.Floor.From)) {
			c.amnesia.floors[env.Floor.From.Name] = env.Floor.Granted
		}
		c.observeEpoch(max(env.Floor.Granted, env.Floor.Floor))
	case env.Named != nil:
		rep := c.onNamed(now, *env.Named)
		reply = &envelope{NamedReply: &rep}
	case env.NamedReply != nil:
		c.onNamedReply(now, *env.NamedReply)
	case env.NamedList:
		reply = &envelope{NamedListReply: c.onNamedList(now)}
	case env.CanTake:
		reply = &envelope{CanTakeReply: c.canTake(now)}
	}
	c.process(now)
	return reply
}

// vote answers a lease request as a voter, or refuses as a non-voter.
func (c *core) vote(now time.Time, req leasing.Request) leasing.Reply {
	refuse := func(r leasing.Reason) leasing.Reply {
		return leasing.Reply{Seq: req.Seq, Epoch: req.Epoch, Voter: toLeasing(c.cfg.Self), Reason: r, Highest: c.granted.Epoch()}
	}
	if c.grants == nil {
		return refuse(leasing.ReasonNotVoter)
	}
	c.fetchNamedRoster(req)
	if req.Kind != leasing.Release && c.epochJumps(req.Epoch) {
		c.reportJump(now, req.Candidate.Name, req.Epoch)
		return refuse(leasing.ReasonEpochJump)
	}
	c.observeEpoch(req.Epoch)
	if c.amnesia.active && req.Kind != leasing.Release {
		if err := c.recover(now); err != nil {
			c.storageFailed(now, err)
			return refuse(leasing.ReasonStorage)
		}
		if c.amnesia.active {
			return refuse(leasing.ReasonRestarting)
		}
	}
	rep := c.grants.Handle(now, req, c.roster())
	if rep.Reason == leasing.ReasonStorage {
		c.storageFailed(now, c.grants.StoreErr())
	}
	if rep.Granted && req.Kind == leasing.Renew {
		c.m.Heard(now, toBully(req.Candidate), req.Epoch) // the leader renews its term through this node
	}
	return rep
}

// fetchNamedRoster asks a candidate for its roster when its request names a
// newer step of this node's cluster than the one this node holds. Gossip
// advertises only a roster's version, so a step of the same version
// proposed in a later term is not fetched otherwise (maybeFetchRoster), and
// a leader pushes only to members of an older version: a voter holding
// another leader's uncommitted step of that version, which does not name
// it, refused the later step's candidate as a non-voter round after round,
// and with two such steps the cluster had no leader for good (a random
// schedule, 155,423). Adopting the step is as safe as any fetched roster
// (adoptNewer); the refusal stands, and the next round counts the vote.
func (c *core) fetchNamedRoster(req leasing.Request) {
	cur := c.roster()
	named := leasing.Roster{Version: req.RosterVersion, Epoch: req.RosterEpoch}
	if req.Kind == leasing.Release || cur.IsZero() || req.ClusterID != cur.ClusterID || !named.Newer(cur) {
		return
	}
	c.log.Debug("a candidate names a newer roster step; fetching it", "from", req.Candidate.Name,
		"version", req.RosterVersion, "epoch", req.RosterEpoch, "mine", cur.String())
	c.out = append(c.out, outMsg{to: toBully(req.Candidate), env: envelope{RosterFetch: true}})
}

// process carries out what the machine asks, in the order that keeps epochs
// safe: persist the highest epoch, then queue messages, then lease work.
func (c *core) process(now time.Time) {
	defer c.forgetMootReasons()
	defer c.traceState()
	c.noteRosterStep(now)
	for {
		rd := c.m.Ready()
		if rd.RefusedEpoch != 0 {
			c.reportJump(now, rd.RefusedFrom.Name, rd.RefusedEpoch)
		}
		if rd.Exhausted && !c.warned["exhausted"] {
			c.warned["exhausted"] = true
			c.log.Error("this node's epoch is the largest there is: it will not start a term; the epochs were driven up by a forged or corrupt message",
				"epoch", rd.Epoch)
		}
		if c.disk.err == nil {
			if err := c.epochs.Raise(rd.Epoch); err != nil {
				c.storageFailed(now, fmt.Errorf("persist epoch %d: %w", rd.Epoch, err))
			}
		}
		if c.disk.err != nil {
			// The epoch may not be on disk, so no round may use it (I2);
			// the machine, made ineligible, has stopped campaigning. The
			// messages carry only epochs this node has seen, or the term
			// of a leader that stored it when it won.
			rd.Acquire = 0
		}
		var asked []string
		for _, msg := range rd.Messages {
			c.out = append(c.out, outMsg{to: msg.To, env: envelope{Bully: &msg}})
			if msg.Type == bully.MsgElection {
				asked = append(asked, msg.To.Name)
			}
		}
		if !rd.Preempt.IsZero() {
			c.preempt = rd.Preempt
		}
		if len(asked) > 0 {
			c.log.Debug("election: asking the higher nodes", "to", strings.Join(asked, " "),
				"peer_round_trip", c.rtt.timeout(now)) // the wait, when above the election timeout
		}
		if rd.Release != 0 {
			c.log.Info("stepping down: releasing the lease", "epoch", rd.Release, "why", rd.Why,
				"successor", successorNamed(rd.Messages), "leader", c.m.Status().Leader.Name)
			c.release(now, rd.Release)
		}
		if rd.Acquire == 0 {
			return
		}
		c.acquire(now, rd.Acquire)
	}
}

// successorNamed is the successor a RESIGN among msgs names, for the
// step-down log line; "" when none does.
func successorNamed(msgs []bully.Message) string {
	for _, m := range msgs {
		if m.Type == bully.MsgResign {
			return m.Successor.Name
		}
	}
	return ""
}

// electionDue reports whether the election's timer has run out at now:
// the next tick acts on it.
func (c *core) electionDue(now time.Time) bool {
	d := c.m.Deadline()
	return !d.IsZero() && !now.Before(d)
}

// traceState logs, at debug level, each change of the election's state.
func (c *core) traceState() {
	st := c.m.Status()
	if st.State == c.traced {
		return
	}
	c.traced = st.State
	c.log.Debug("election: state", "state", st.State.String(), "leader", st.Leader.Name, "term", st.Term, "epoch", st.Epoch)
}

// errNoRoster explains a quorum node that cannot campaign yet.
var errNoRoster = errors.New("no voter roster yet: waiting for --expect voters to bootstrap, or to learn the roster from a member of the cluster")
