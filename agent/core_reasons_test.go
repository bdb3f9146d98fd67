package agent

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/gossip"
	"github.com/tenurehq/tenure/internal/testlog"
	"github.com/tenurehq/tenure/leasing"
)

// rig drives one core by hand. The core is n9, an eligible observer (it is
// in no roster, so it holds no vote of its own), and its peers are voters
// played by the test: each answers as its behaviour says, or its messages
// fail with an error, as the driver reports a failed send.
type rig struct {
	t     *testing.T
	c     *core
	now   time.Time
	peers map[string]peerPlay
	held  []outMsg // lease requests of held peers, not yet answered
	logs  *testlog.Buffer
}

// peerPlay is how a played peer answers.
type peerPlay struct {
	grant  bool           // grants lease requests
	refuse leasing.Reason // refuses them with this reason
	holder bully.Node     // the holder of its promise, when it refuses as promised
	err    error          // every message to it fails with err
	silent bool           // never answers, and no error is seen
	hold   bool           // its lease replies wait until release
	slow   bool           // its floor replies (reach probe answers) wait until release
}

var rigSelf = bully.Node{ID: 9, Name: "n9"}

// newRig starts n9 with a roster of voters n1..nN, each at 10.0.0.1i:7947.
func newRig(t *testing.T, voters int) *rig {
	var ns []leasing.Node
	for i := 1; i <= voters; i++ {
		ns = append(ns, leasing.Node{ID: uint64(i), Name: fmt.Sprintf("n%d", i)})
	}
	e := LocalElection()
	e.Rand = rand.New(rand.NewPCG(testlog.Seed(t), 1))
	cfg := coreConfig{Self: rigSelf, Eligible: true, Consistency: Quorum,
		Lease: leasing.DefaultTiming().WithTTL(2 * time.Second), Election: e}
	logs := &testlog.Buffer{}
	st := coreStores{epochs: &memStore{}, grants: &memStore{},
		rosters: &memRoster{r: leasing.Bootstrap(ns)}, pledges: &memRoster{}}
	now := time.Unix(1000, 0)
	c, err := newCore(cfg, st, slog.New(slog.NewTextHandler(logs, nil)), now)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, c: c, now: now, peers: map[string]peerPlay{}, logs: logs}
	view := []memberView{{Member: bully.Member{Node: rigSelf, Eligible: true}}}
	for _, n := range ns {
		r.peers[n.Name] = peerPlay{grant: true}
		view = append(view, memberView{Member: bully.Member{Node: toBully(n)}, Voter: true,
			Cluster: leasing.Bootstrap(ns).ClusterID, RosterVersion: 1, PeerAddr: fmt.Sprintf("10.0.0.1%d:7947", n.ID)})
	}
	c.setMembers(now, view)
	return r
}

// run ticks the core for d in 10 ms steps, delivering its messages.
func (r *rig) run(d time.Duration) {
	for end := r.now.Add(d); r.now.Before(end); {
		r.now = r.now.Add(10 * time.Millisecond)
		r.c.tick(r.now)
		r.deliver()
	}
}

// deliver plays the peers' part for the messages the core queued.
func (r *rig) deliver() {
	for i := 0; i < 100; i++ {
		out := r.c.ready()
		if len(out) == 0 {
			return
		}
		for _, m := range out {
			r.answer(m)
		}
	}
	r.t.Fatal("the core keeps sending")
}

func (r *rig) answer(m outMsg) {
	p := r.peers[m.to.Name]
	switch {
	case p.err != nil:
		r.c.sendFailed(r.now, m.to, p.err)
		return
	case p.silent:
		return
	case p.hold && m.env.Lease != nil, p.slow && m.env.FloorQuery:
		r.held = append(r.held, m)
		return
	}
	r.c.peerReplied(r.now, m.to, time.Millisecond, false)
	if reply := r.reply(m, p); reply != nil {
		r.c.receive(r.now, *reply)
	}
}

// reply is a played peer's answer to m, if any.
func (r *rig) reply(m outMsg, p peerPlay) *envelope {
	switch env := m.env; {
	case env.FloorQuery:
		return &envelope{Floor: &floorReply{From: m.to}}
	case env.Lease != nil && env.Lease.Kind != leasing.Release:
		rep := leasing.Reply{Seq: env.Lease.Seq, Epoch: env.Lease.Epoch, Voter: toLeasing(m.to), Highest: env.Lease.Epoch}
		if rep.Granted = p.grant; !p.grant {
			rep.Reason, rep.Highest = p.refuse, 0
			if p.refuse == leasing.ReasonPromised {
				rep.Holder, rep.Remaining = toLeasing(p.holder), time.Second
			}
		}
		return &envelope{LeaseReply: &rep}
	}
	return nil
}

// release answers the held lease requests and floor queries.
func (r *rig) release() {
	held := r.held
	r.held = nil
	for _, m := range held {
		r.c.receive(r.now, *r.reply(m, peerPlay{grant: true}))
	}
	r.deliver()
}

func (r *rig) status() snapshot { return r.c.snapshot(r.now) }

// runUntil runs the rig until cond holds of its status, for at most d, and
// returns the last status.
func (r *rig) runUntil(d time.Duration, cond func(snapshot) bool) snapshot {
	for end := r.now.Add(d); r.now.Before(end) && !cond(r.status()); {
		r.run(10 * time.Millisecond)
	}
	return r.status()
}

// TestCutOffNodeNamesUnreachableVoters: a node whose peer messages to most
// voters fail says, in status, which voters did not answer its reach
// probe, at which peer address, and the error its messages to them got.
func TestCutOffNodeNamesUnreachableVoters(t *testing.T) {
	r := newRig(t, 3)
	r.peers["n2"] = peerPlay{err: fmt.Errorf("gossip: call 10.0.0.12:7947: %w", syscall.ECONNREFUSED)}
	r.peers["n3"] = peerPlay{err: fmt.Errorf("gossip: call 10.0.0.13:7947: %w: waiting for a connection: %w", gossip.ErrUnreachable, errTimeout{})}
	r.run(5 * time.Second)
	st := r.status()
	want := "no quorum: cannot reach a majority of the voters: no reply from 2 of 3 voters: " +
		"n2 (10.0.0.12:7947): connection refused; n3 (10.0.0.13:7947): i/o timeout while connecting"
	if st.state != "no-quorum" || st.reason != want {
		t.Fatalf("state %q, reason %q; want no-quorum and %q", st.state, st.reason, want)
	}
	if logs := r.logs.String(); !containsAll(logs, "peer messages to a member are not delivered", "member=n2", "err=\"connection refused\"") {
		t.Errorf("the first failure to reach n2 is not logged:\n%s", logs)
	}
	r.peers["n2"] = peerPlay{grant: true}
	if _, err := r.c.leaderAfter(r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if logs := r.logs.String(); !containsAll(logs, "peer messages to a member are delivered again", "member=n2") {
		t.Errorf("the repair of n2 is not logged:\n%s", logs)
	}
}

// TestLateProbeAnswersEndCutOff: answers to a reach probe that arrive
// after its budget ran out still count. On a loaded host voters answer
// late; a node that ignored those answers stayed cut off, neither
// campaigning nor answering ELECTIONs, until its next probe an announce
// interval later.
func TestLateProbeAnswersEndCutOff(t *testing.T) {
	r := newRig(t, 3)
	r.peers["n2"] = peerPlay{grant: true, slow: true}
	r.peers["n3"] = peerPlay{grant: true, slow: true}
	st := r.runUntil(3*time.Second, func(st snapshot) bool { return st.state == "no-quorum" })
	if !strings.HasPrefix(st.reason, unreachablePrefix) {
		t.Fatalf("state %q, reason %q; want cut off while n2 and n3 have not answered", st.state, st.reason)
	}
	next := r.c.reach.next
	r.run(50 * time.Millisecond)
	if len(r.held) != 2 || !r.now.Before(next) {
		t.Fatalf("%d floor queries held at %v, next probe at %v: want n2's and n3's, before the next probe", len(r.held), r.now, next)
	}
	r.peers["n2"] = peerPlay{grant: true}
	r.peers["n3"] = peerPlay{grant: true}
	r.release()
	r.run(10 * time.Millisecond)
	if st := r.status(); r.c.reach.cutOff || strings.HasPrefix(st.reason, unreachablePrefix) {
		t.Fatalf("still cut off after n2 and n3 answered (reason %q); the next probe is due in %v", st.reason, next.Sub(r.now))
	}
	if _, err := r.c.leaderAfter(r, 3*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestProbeWaitsForItsTurn: a node probes the voters only when its
// campaign is a probe budget and a rank delay away, not as soon as it
// starts: in a fleet that starts in name order each new node is the
// highest it knows for a while, and nodes that probed as they started
// made every voter answer a probe from nearly every node.
func TestProbeWaitsForItsTurn(t *testing.T) {
	r := newRig(t, 3)
	for _, n := range []string{"n1", "n2", "n3"} {
		r.peers[n] = peerPlay{grant: true, slow: true}
	}
	campaign := r.c.m.Deadline()
	window := r.c.cfg.Lease.AcquireBudget + r.c.cfg.Election.RankDelay
	if campaign.Sub(r.now) <= window+20*time.Millisecond {
		t.Fatalf("the first campaign is due in %v: the test needs it further off than %v", campaign.Sub(r.now), window)
	}
	for r.now.Before(campaign) && len(r.held) == 0 {
		r.run(10 * time.Millisecond)
	}
	if len(r.held) == 0 {
		t.Fatalf("no probe before the campaign at %v", campaign)
	}
	if early := campaign.Sub(r.now); early > window {
		t.Fatalf("probed %v before the campaign, want at most %v", early, window)
	}
}

// errTimeout is a net.Error that timed out.
type errTimeout struct{}

func (errTimeout) Error() string   { return "i/o timeout" }
func (errTimeout) Timeout() bool   { return true }
func (errTimeout) Temporary() bool { return true }

// leaderAfter runs the rig until its core leads, for at most d.
func (c *core) leaderAfter(r *rig, d time.Duration) (time.Duration, error) {
	begin := r.now
	for end := r.now.Add(d); r.now.Before(end); r.run(10 * time.Millisecond) {
		if c.leaseValid(r.now) {
			return r.now.Sub(begin), nil
		}
	}
	st := r.status()
	return 0, fmt.Errorf("no lease after %v: state %q, reason %q", d, st.state, st.reason)
}

// TestFailedAcquireNamesRefusalsAndSilence: a failed acquire says how many
// grants it had of how many needed, which voters refused and why (for a
// promise, to whom), and
// which did not answer, with their peer address and last error; status,
// its quorum count and the log agree.
func TestFailedAcquireNamesRefusalsAndSilence(t *testing.T) {
	r := newRig(t, 5)
	r.peers["n2"] = peerPlay{refuse: leasing.ReasonPromised, holder: bully.Node{ID: 1, Name: "n1"}}
	r.peers["n3"] = peerPlay{refuse: leasing.ReasonStaleEpoch}
	r.peers["n5"] = peerPlay{silent: true}
	r.c.sendFailed(r.now, bully.Node{ID: 5, Name: "n5"},
		fmt.Errorf("gossip: call 10.0.0.15:7947: gossip: peer unreachable: dial tcp 10.0.0.15:7947: connect: %w", syscall.EHOSTUNREACH))
	st := r.runUntil(3*time.Second, func(st snapshot) bool { return st.state == "no-quorum" })
	want := "no quorum: 2 of 3 needed grants; refused: n2 (promised to n1), n3 (stale-epoch); " +
		"no reply from 1 of 5 voters: n5 (10.0.0.15:7947): no route to host"
	if st.state != "no-quorum" || st.reason != want {
		t.Fatalf("state %q, reason %q; want no-quorum and %q", st.state, st.reason, want)
	}
	if st.quorum != (leasing.Quorum{Have: 2, Need: 3}) {
		t.Errorf("quorum %+v, want the failed round's 2 of 3", st.quorum)
	}
	if logs := r.logs.String(); !strings.Contains(logs, "lease not acquired") || !strings.Contains(logs, "refused: n2 (promised to n1)") {
		t.Errorf("the failed acquire is not logged with its reason:\n%s", logs)
	}
}

// TestReasonsAreBounded: a reason names at most five voters.
func TestReasonsAreBounded(t *testing.T) {
	r := newRig(t, 9)
	for i := 2; i <= 8; i++ {
		r.peers[fmt.Sprintf("n%d", i)] = peerPlay{err: syscall.ECONNREFUSED}
	}
	r.run(3 * time.Second)
	st := r.status()
	if !strings.HasSuffix(st.reason, "n6 (10.0.0.16:7947): connection refused; and 2 more") || strings.Contains(st.reason, "n7") {
		t.Fatalf("reason %q: want five voters named, then \"and 2 more\"", st.reason)
	}
}

// TestRenewalFailureNamesVoters: the log of a failed renewal says which
// voters refused, with their reasons, and which did not answer, and never
// reports as many grants as needed.
func TestRenewalFailureNamesVoters(t *testing.T) {
	r := newRig(t, 3)
	if _, err := r.c.leaderAfter(r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	r.peers["n1"] = peerPlay{refuse: leasing.ReasonNotHolder}
	r.peers["n2"] = peerPlay{err: syscall.ECONNREFUSED}
	r.run(time.Second)
	logs := r.logs.String()
	if !containsAll(logs, "lease renewal failed", "granted=1 need=2", `refused="n1 (not-holder)"`,
		`no_reply="n2 (10.0.0.12:7947): connection refused"`) {
		t.Fatalf("renewal failure log:\n%s", logs)
	}
}

// TestEndedTermShowsNoQuorum: once a term has ended (here by resign), the
// count of its last renewal no longer describes the node: status must not
// show a quorum for a node that does not lead. It used to keep the last
// renewal's "2 grants, 2 needed" through the campaigns that followed.
func TestEndedTermShowsNoQuorum(t *testing.T) {
	r := newRig(t, 3)
	if _, err := r.c.leaderAfter(r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	r.run(time.Second) // renewals
	if st := r.status(); st.quorum != (leasing.Quorum{Have: 2, Need: 2}) {
		t.Fatalf("setup: leader's quorum %+v, want 2 of 2", st.quorum)
	}
	if err := r.c.resign(r.now); err != nil {
		t.Fatal(err)
	}
	r.c.stopped(r.now, r.c.stopping.epoch)
	for _, n := range []string{"n1", "n2", "n3"} {
		r.peers[n] = peerPlay{silent: true}
	}
	for end := r.now.Add(5 * time.Second); r.now.Before(end); r.run(10 * time.Millisecond) {
		if st := r.status(); st.state != "leader" && st.quorum.Have >= st.quorum.Need {
			t.Fatalf("after its term ended: state %q, quorum %+v", st.state, st.quorum)
		}
	}
}

// TestFollowerReportsRosterNeed: a follower, which runs no lease round,
// reports the roster's need (it used to report 0), and a failed acquire of
// its own stops being the reason once a leader is known.
func TestFollowerReportsRosterNeed(t *testing.T) {
	r := newRig(t, 3)
	for _, n := range []string{"n2", "n3"} {
		r.peers[n] = peerPlay{refuse: leasing.ReasonPromised}
	}
	if st := r.runUntil(3*time.Second, func(st snapshot) bool { return st.state == "no-quorum" }); st.state != "no-quorum" || st.quorum != (leasing.Quorum{Have: 1, Need: 2}) {
		t.Fatalf("setup: state %q quorum %+v, want no-quorum after 1 of 2 grants", st.state, st.quorum)
	}
	n10 := bully.Node{ID: 10, Name: "n10"}
	view := []memberView{{Member: bully.Member{Node: rigSelf, Eligible: true}}, {Member: bully.Member{Node: n10, Eligible: true}}}
	for _, mv := range r.c.live {
		if mv.Node != rigSelf {
			view = append(view, mv)
		}
	}
	r.c.setMembers(r.now, view)
	r.c.receive(r.now, envelope{Bully: &bully.Message{Type: bully.MsgCoordinator, From: n10, To: rigSelf,
		Leader: n10, Term: 50, Epoch: 50}})
	st := r.status()
	if st.status.Leader != n10 || st.quorum != (leasing.Quorum{Need: 2}) || r.c.rounds.noQuorum != "" {
		t.Fatalf("following n10: leader %v, quorum %+v, stale reason %q; want n10, 0 of 2, no reason",
			st.status.Leader, st.quorum, r.c.rounds.noQuorum)
	}
}

// TestPeerBookForgetsDepartedNodes: the addresses and failures of nodes
// that gossip no longer lists and the roster does not name are dropped;
// those of the roster's voters are kept, so a crashed voter is still
// named at its address.
func TestPeerBookForgetsDepartedNodes(t *testing.T) {
	r := newRig(t, 3)
	n7 := bully.Node{ID: 7, Name: "n7"}
	view := []memberView{{Member: bully.Member{Node: rigSelf, Eligible: true}},
		{Member: bully.Member{Node: n7}, PeerAddr: "10.0.0.17:7947"}}
	r.c.setMembers(r.now, view)
	r.c.sendFailed(r.now, n7, syscall.ECONNREFUSED)
	r.c.sendFailed(r.now, bully.Node{ID: 2, Name: "n2"}, syscall.ECONNREFUSED)
	r.c.setMembers(r.now, view[:1])
	if _, ok := r.c.peers.addr["n7"]; ok || len(r.c.peers.failed) != 1 {
		t.Errorf("n7 is remembered after it left: addr %v, failed %v", r.c.peers.addr, r.c.peers.failed)
	}
	if got := r.c.describePeer(r.now, "n2"); got != "n2 (10.0.0.12:7947, not alive in gossip): connection refused" {
		t.Errorf("n2, a voter no longer listed, is described as %q", got)
	}
}

// TestRoundBudgetCountsFromDispatch: a lease round's budget counts from
// when its requests leave, not from when the round started. A candidate
// persists its epoch in between; when that write is slow, voters that
// answer within a budget of the requests leaving still make the round.
func TestRoundBudgetCountsFromDispatch(t *testing.T) {
	r := newRig(t, 3)
	r.peers["n2"] = peerPlay{grant: true, hold: true}
	r.peers["n3"] = peerPlay{grant: true, hold: true}
	r.runUntil(5*time.Second, func(snapshot) bool { return len(r.held) > 0 })
	rd := r.c.rounds.current
	if rd == nil || len(r.held) != 2 {
		t.Fatalf("round %v, %d requests held: want a round in flight with its requests to n2 and n3", rd, len(r.held))
	}
	budget := r.c.cfg.Lease.AcquireBudget
	// The epoch write took three quarters of a budget: the requests left then.
	r.c.dispatched(rd.Sent.Add(3 * budget / 4))
	r.run(budget + budget/4) // past a budget from the start, within one from the dispatch
	if r.c.rounds.current != rd {
		t.Fatalf("the round ended %v after it started, before a budget (%v) had passed since its requests left", r.now.Sub(rd.Sent), budget)
	}
	r.peers["n2"] = peerPlay{grant: true}
	r.peers["n3"] = peerPlay{grant: true}
	r.release()
	if !r.c.leaseValid(r.now) {
		st := r.status()
		t.Fatalf("no lease after the voters granted within a budget of the dispatch: state %q, reason %q", st.state, st.reason)
	}
	if !r.c.lease.deadline.Equal(r.c.cfg.Lease.LeaderDeadline(rd.Sent)) {
		t.Errorf("lease deadline %v, want it counted from the round's start %v (the safe side)", r.c.lease.deadline, rd.Sent)
	}
}

// TestPeerAddressEndsNoAddressFailure: a voter whose messages failed for
// want of a peer address is no longer described with that failure once
// gossip lists its address.
func TestPeerAddressEndsNoAddressFailure(t *testing.T) {
	r := newRig(t, 3)
	r.c.sendFailed(r.now, bully.Node{ID: 2, Name: "n2"}, errNoPeerAddr)
	r.c.sendFailed(r.now, bully.Node{ID: 3, Name: "n3"}, fmt.Errorf("call: %w", syscall.ECONNREFUSED))
	var view []memberView
	for _, mv := range r.c.live {
		view = append(view, mv)
	}
	view = append(view, memberView{Member: bully.Member{Node: rigSelf, Eligible: true}})
	r.c.setMembers(r.now, view)
	if got, want := r.c.describePeer(r.now, "n2"), "n2 (10.0.0.12:7947)"; got != want {
		t.Errorf("n2 described as %q once its address is listed; want %q", got, want)
	}
	if got, want := r.c.describePeer(r.now, "n3"), "n3 (10.0.0.13:7947): connection refused"; got != want {
		t.Errorf("n3 described as %q; want %q (a failure other than a missing address stays until n3 replies)", got, want)
	}
}

// TestLateGrantOfFailedAcquireIsReleased: a voter whose grant comes after
// the candidate's acquire round failed is sent a release for it at once
// (the release at the round's end may have been lost), so it does not
// hold a promise nobody uses for a TTL; a late refusal, a grant of an
// epoch that was no failed acquire of this node, or the answer to a
// release, gets none.
func TestLateGrantOfFailedAcquireIsReleased(t *testing.T) {
	r := newRig(t, 3)
	r.peers["n2"] = peerPlay{grant: true, hold: true}
	r.peers["n3"] = peerPlay{refuse: leasing.ReasonPromised, holder: bully.Node{ID: 1, Name: "n1"}}
	var acquire *outMsg
	r.runUntil(5*time.Second, func(snapshot) bool {
		for i, m := range r.held {
			if m.env.Lease.Kind == leasing.Acquire {
				acquire = &r.held[i]
			}
		}
		return acquire != nil && r.c.rounds.current == nil
	})
	if acquire == nil || r.c.rounds.current != nil || r.c.leaseValid(r.now) {
		t.Fatalf("want n9's acquire to fail with n2's grant held (acquire held: %v, round in flight: %v)", acquire != nil, r.c.rounds.current != nil)
	}
	late := func(rep leasing.Reply) []outMsg {
		r.c.receive(r.now, envelope{LeaseReply: &rep})
		return r.c.ready()
	}
	releases := func(out []outMsg) (to []string) {
		for _, m := range out {
			if m.env.Lease != nil && m.env.Lease.Kind == leasing.Release {
				to = append(to, fmt.Sprintf("%s@%d", m.to.Name, m.env.Lease.Epoch))
			}
		}
		return to
	}
	req := acquire.env.Lease
	n2 := leasing.Node{ID: 2, Name: "n2"}
	if got := releases(late(leasing.Reply{Seq: req.Seq, Epoch: req.Epoch, Voter: n2, Reason: leasing.ReasonPromised})); len(got) != 0 {
		t.Errorf("a late refusal was answered with releases %v", got)
	}
	if got := releases(late(leasing.Reply{Seq: req.Seq, Epoch: req.Epoch + 7, Voter: n2, Granted: true})); len(got) != 0 {
		t.Errorf("a grant of an epoch n9 never tried was answered with releases %v", got)
	}
	out := late(leasing.Reply{Seq: req.Seq, Epoch: req.Epoch, Voter: n2, Granted: true})
	got := releases(out)
	if want := fmt.Sprintf("n2@%d", req.Epoch); len(got) != 1 || got[0] != want {
		t.Fatalf("n2's late grant of the failed acquire was answered with releases %v, want [%s]", got, want)
	}
	// A voter answers a release as granted, echoing its (zero) number: that
	// answer is no grant to release again.
	for _, m := range out {
		if rel := m.env.Lease; rel != nil && rel.Kind == leasing.Release {
			if again := releases(late(leasing.Reply{Seq: rel.Seq, Epoch: rel.Epoch, Voter: n2, Granted: true})); len(again) != 0 {
				t.Errorf("the answer to the release was answered with releases %v", again)
			}
		}
	}
}
