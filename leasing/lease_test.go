package leasing

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTimingArithmetic(t *testing.T) {
	t0 := time.Unix(100, 0)
	cases := []struct {
		ttl      time.Duration
		drift    float64
		validity time.Duration
		renew    time.Duration
	}{
		{10 * time.Second, 0.01, 9900 * time.Millisecond, 3333333333},
		{2 * time.Second, 0.05, 1900 * time.Millisecond, 666666666},
		{time.Second, 0, time.Second, 333333333},
	}
	for _, c := range cases {
		tm := DefaultTiming().WithTTL(c.ttl)
		tm.MaxDrift = c.drift
		if got := tm.Validity(); got != c.validity {
			t.Errorf("ttl %v drift %v: validity %v, want %v", c.ttl, c.drift, got, c.validity)
		}
		if got := tm.RenewInterval(); got != c.renew {
			t.Errorf("ttl %v: renew %v, want %v", c.ttl, got, c.renew)
		}
		if got := tm.LeaderDeadline(t0); got != t0.Add(c.validity) {
			t.Errorf("deadline %v", got)
		}
		if got := tm.PromiseExpiry(t0); got != t0.Add(c.ttl) {
			t.Errorf("expiry %v", got)
		}
	}
}

// TestLeaderDeadlineBeforePromiseExpiry is the I1/I3 arithmetic: with clock
// rates within the drift bound, a leader's deadline (counted from before its
// request left) falls before every voter's promise expiry (counted from after
// it arrived), measured in real time.
func TestLeaderDeadlineBeforePromiseExpiry(t *testing.T) {
	tm := DefaultTiming()
	for _, rates := range [][2]float64{{1, 1}, {1.0049, 0.9951}, {0.995, 1.0049}, {1.00999, 1}} {
		leaderRate, voterRate := rates[0], rates[1]
		// Real time for the leader's clock to advance Validity, and for the
		// voter's clock to advance TTL (the request arrives later still).
		leaderReal := float64(tm.Validity()) / leaderRate
		voterReal := float64(tm.TTL) / voterRate
		if leaderReal >= voterReal {
			t.Errorf("rates %v: leader deadline after %vns real, voter promise ends after %vns", rates, leaderReal, voterReal)
		}
	}
}

func TestTimingValidate(t *testing.T) {
	good := DefaultTiming()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, tm := range map[string]Timing{
		"zero ttl":   good.WithTTL(0),
		"drift":      {TTL: time.Second, MaxDrift: 0.6, AcquireBudget: time.Millisecond},
		"budget":     {TTL: time.Second, MaxDrift: 0.01, AcquireBudget: 400 * time.Millisecond},
		"neg budget": {TTL: time.Second, MaxDrift: 0.01, AcquireBudget: -1},
	} {
		if err := tm.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, tm)
		}
	}
}

type memGrants struct {
	epoch   uint64
	longest time.Duration
	fail    bool
}

func (m *memGrants) Epoch() uint64             { return m.epoch }
func (m *memGrants) LongestTTL() time.Duration { return m.longest }
func (m *memGrants) Raise(e uint64) error      { return m.Record(e, 0) }
func (m *memGrants) Record(e uint64, ttl time.Duration) error {
	if m.fail {
		return errors.New("disk full")
	}
	m.epoch, m.longest = max(m.epoch, e), max(m.longest, ttl)
	return nil
}

// requester returns a builder of requests for roster r's cluster and
// version, with TTL ttl.
func requester(r Roster, ttl time.Duration) func(k Kind, c Node, e uint64) Request {
	return func(k Kind, c Node, e uint64) Request {
		return Request{Kind: k, Candidate: c, Epoch: e, TTL: ttl, ClusterID: r.ClusterID, RosterVersion: r.Version}
	}
}

func TestVoterRules(t *testing.T) {
	a, b, v := Node{1, "a"}, Node{2, "b"}, Node{3, "v"}
	r := Bootstrap([]Node{a, b, v})
	t0 := time.Unix(0, 0)
	ttl := time.Second
	req := requester(r, ttl)
	store := &memGrants{epoch: 4} // has granted before: holds for one TTL
	vt := NewVoter(v, store, t0, VoterConfig{TTL: ttl, MaxTTL: 3 * ttl})
	steps := []struct {
		at     time.Duration
		req    Request
		grant  bool
		reason Reason
	}{
		{0, req(Acquire, a, 5), false, ReasonRestarting},
		{ttl, req(Acquire, a, 4), false, ReasonStaleEpoch},
		{ttl, req(Acquire, a, 5), true, ""},
		{ttl + 1, req(Acquire, b, 6), false, ReasonPromised},
		{ttl + 2, req(Renew, b, 5), false, ReasonPromised},
		{ttl + 3, req(Renew, a, 5), true, ""},
		{ttl + 4, req(Acquire, a, 6), true, ""}, // the holder moves to a new term
		{2*ttl + 4, req(Acquire, b, 6), false, ReasonStaleEpoch},
		{2*ttl + 4, req(Renew, a, 6), true, ""}, // a's promise ran out: the voter rejoins a's term
		{2*ttl + 5, req(Acquire, b, 7), false, ReasonPromised},
		{3*ttl + 5, req(Acquire, b, 7), true, ""},
		{3*ttl + 6, req(Renew, a, 6), false, ReasonPromised},
		{3*ttl + 6, req(Release, b, 7), true, ""},
		{3*ttl + 6, req(Renew, b, 7), false, ReasonStaleEpoch},   // a renewal overtaken by the release
		{3*ttl + 7, req(Acquire, a, 7), false, ReasonStaleEpoch}, // epoch 7 was granted already
		{3*ttl + 7, req(Acquire, a, 8), true, ""},                // released: no wait
		// b gave up an acquire of epoch 10 this voter never saw, and its
		// release arrived first: the late acquire is refused, not granted
		// for a whole TTL to a round nobody counts.
		{5 * ttl, req(Release, b, 10), true, ""},
		{5 * ttl, req(Acquire, b, 10), false, ReasonStaleEpoch},
		{5 * ttl, req(Acquire, a, 9), false, ReasonStaleEpoch},
		{5 * ttl, req(Acquire, a, 11), true, ""},
		// A release far above every epoch (a bug, or a peer gone wrong)
		// does not raise the floor.
		{5*ttl + 1, req(Release, a, 11), true, ""},
		{5*ttl + 1, req(Release, b, 1_000_000), true, ""},
		{5*ttl + 2, req(Acquire, b, 12), true, ""},
	}
	for i, s := range steps {
		rep := vt.Handle(t0.Add(s.at), s.req, r)
		if rep.Granted != s.grant || rep.Reason != s.reason {
			t.Fatalf("step %d %v %s epoch %d: granted=%v reason=%q, want %v %q", i, s.req.Kind, s.req.Candidate.Name, s.req.Epoch, rep.Granted, rep.Reason, s.grant, s.reason)
		}
		if rep.Granted && s.req.Kind == Acquire && store.epoch != s.req.Epoch {
			t.Fatalf("step %d: granted epoch %d but stored %d", i, s.req.Epoch, store.epoch)
		}
	}
}

// TestVoterHoldCoversLongestPromise: a voter whose TTL is 1s but that
// promised a leader 3s (a rolling change of --lease-ttl) holds for 3s after
// a restart; a voter that only ever granted renewals holds too; one whose
// data dir names it in a roster holds even with an empty store.
func TestVoterHoldCoversLongestPromise(t *testing.T) {
	a, v := Node{1, "a"}, Node{3, "v"}
	r := Bootstrap([]Node{a, v})
	t0 := time.Unix(0, 0)
	cfg := VoterConfig{TTL: time.Second, MaxTTL: 3 * time.Second}
	store := &memGrants{}
	renew := Request{Kind: Renew, Candidate: a, Epoch: 5, TTL: 3 * time.Second, ClusterID: r.ClusterID, RosterVersion: r.Version}
	if rep := NewVoter(v, store, t0, cfg).Handle(t0, renew, r); !rep.Granted {
		t.Fatalf("renewal refused: %s", rep.Reason)
	}
	if store.epoch != 5 || store.longest != 3*time.Second {
		t.Fatalf("a renewal stored epoch %d ttl %v, want 5 and 3s", store.epoch, store.longest)
	}
	restarted := NewVoter(v, store, t0.Add(time.Second), cfg)
	if !restarted.Holding(t0.Add(3*time.Second)) || restarted.Holding(t0.Add(4*time.Second)) {
		t.Fatal("the restart hold does not last exactly the longest TTL promised")
	}
	fresh := NewVoter(v, &memGrants{}, t0, VoterConfig{TTL: time.Second, MaxTTL: 3 * time.Second, Restarted: true})
	if !fresh.Holding(t0.Add(999*time.Millisecond)) || fresh.Holding(t0.Add(time.Second)) {
		t.Fatal("a restarted voter with an empty store does not hold for its TTL")
	}
}

func TestVoterRefusesOtherRostersAndStorageFailure(t *testing.T) {
	a, v := Node{1, "a"}, Node{3, "v"}
	r := Bootstrap([]Node{a, v})
	t0 := time.Unix(0, 0)
	store := &memGrants{}
	vt := NewVoter(v, store, t0, VoterConfig{MaxTTL: time.Minute})
	base := Request{Kind: Acquire, Candidate: a, Epoch: 1, TTL: time.Second, ClusterID: r.ClusterID, RosterVersion: r.Version}
	newer := r.With(Node{4, "w"}, 9)
	cases := []struct {
		name   string
		edit   func(*Request)
		roster Roster
		reason Reason
	}{
		{"other cluster", func(q *Request) { q.ClusterID = "x" }, r, ReasonOtherCluster},
		{"stale roster", func(q *Request) {}, newer, ReasonStaleRoster},
		{"not voter", func(q *Request) {}, Bootstrap([]Node{a}), ReasonNotVoter},
		{"huge ttl", func(q *Request) { q.TTL = time.Hour }, r, ReasonTTL},
	}
	for _, c := range cases {
		q := base
		c.edit(&q)
		if rep := vt.Handle(t0, q, c.roster); rep.Granted || rep.Reason != c.reason {
			t.Errorf("%s: %+v, want refusal %q", c.name, rep, c.reason)
		}
	}
	if rep := vt.Handle(t0, base, newer); rep.Roster == nil || rep.Roster.Version != 2 {
		t.Errorf("a stale-roster refusal must carry the newer roster: %+v", rep)
	}
	store.fail = true
	if rep := vt.Handle(t0, base, r); rep.Granted || rep.Reason != ReasonStorage {
		t.Fatalf("unpersistable grant: %+v", rep)
	}
	if err := vt.StoreErr(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("StoreErr after a failed record = %v, want the store's error", err)
	}
	store.fail = false
	if rep := vt.Handle(t0, base, r); !rep.Granted || vt.StoreErr() != nil {
		t.Fatalf("after the store recovered: %+v, StoreErr %v", rep, vt.StoreErr())
	}
}

func TestRoundCounting(t *testing.T) {
	ns := []Node{{1, "a"}, {2, "b"}, {3, "c"}, {4, "d"}, {5, "e"}}
	r := Bootstrap(ns)
	t0 := time.Unix(0, 0)
	rd := NewRound(1, Acquire, 7, r, t0, time.Second)
	counted := []bool{
		rd.Add(Reply{Seq: 1, Epoch: 7, Voter: ns[0], Granted: true, Highest: 7}),
		rd.Add(Reply{Seq: 1, Epoch: 7, Voter: ns[0], Granted: true, Highest: 7}), // repeat
		rd.Add(Reply{Seq: 1, Epoch: 7, Voter: Node{9, "x"}, Granted: true}),      // outsider
		rd.Add(Reply{Seq: 0, Epoch: 7, Voter: ns[4], Granted: true}),             // an older round's
		rd.Add(Reply{Seq: 1, Epoch: 6, Voter: ns[4], Granted: true}),             // another epoch's
		rd.Add(Reply{Seq: 1, Epoch: 7, Voter: ns[1], Reason: ReasonPromised, Highest: 9, Remaining: 3 * time.Second}),
	}
	if want := []bool{true, false, false, false, false, false}; !slices.Equal(counted, want) {
		t.Fatalf("Add counted as grants %v, want %v", counted, want)
	}
	if rd.Won() || rd.Lost(t0) || rd.Quorum() != (Quorum{1, 3}) {
		t.Fatalf("after 1 grant: won=%v lost=%v quorum=%v", rd.Won(), rd.Lost(t0), rd.Quorum())
	}
	rd.Add(Reply{Seq: 1, Epoch: 7, Voter: ns[2], Reason: ReasonPromised, Remaining: time.Second})
	rd.Add(Reply{Seq: 1, Epoch: 7, Voter: ns[3], Reason: ReasonStaleEpoch})
	if !rd.Lost(t0) || rd.Highest() != 9 || rd.RetryAfter() != 3*time.Second {
		t.Fatalf("three refusals of five: lost=%v highest=%d retry=%v", rd.Lost(t0), rd.Highest(), rd.RetryAfter())
	}
	rd2 := NewRound(2, Renew, 7, r, t0, time.Second)
	for _, n := range ns[:3] {
		rd2.Add(Reply{Seq: 2, Epoch: 7, Voter: n, Granted: true})
	}
	if !rd2.Won() || rd2.Lost(t0.Add(time.Hour)) {
		t.Fatal("three grants of five must win, and a won round is never lost")
	}
	if !NewRound(3, Acquire, 1, r, t0, time.Second).Lost(t0.Add(time.Second)) {
		t.Fatal("a round past its budget is lost")
	}
}

// TestRoundBudgetFromDispatch: a round dispatched after it started has a
// whole budget from the dispatch; Sent, and the wait a refusal for another
// candidate's round asks for, do not move.
func TestRoundBudgetFromDispatch(t *testing.T) {
	ns := []Node{{1, "a"}, {2, "b"}, {3, "c"}}
	t0 := time.Unix(0, 0)
	rd := NewRound(1, Acquire, 7, Bootstrap(ns), t0, time.Second)
	rd.Dispatched(t0.Add(700 * time.Millisecond))
	rd.Dispatched(t0.Add(100 * time.Millisecond)) // the requests left once: a second call changes nothing
	if rd.Lost(t0.Add(1690*time.Millisecond)) || !rd.Lost(t0.Add(1700*time.Millisecond)) || !rd.Sent.Equal(t0) {
		t.Fatalf("dispatched 0.7 s after it started: budget ends %v, sent %v; want 1.7 s and 0", rd.Budget.Sub(t0), rd.Sent.Sub(t0))
	}
	rd.Add(Reply{Seq: 1, Epoch: 7, Voter: ns[0], Reason: ReasonPromised, Acquiring: true, Age: 400 * time.Millisecond, Remaining: 5 * time.Second})
	if got := rd.RetryAfter(); got != 600*time.Millisecond {
		t.Errorf("a promise to an acquire 0.4 s old asks a wait of %v; want the rest of one budget, 0.6 s", got)
	}
}

// TestJointRosterNeedsBothMajorities: under a joint roster a round needs a
// majority of the new set and of the old one.
func TestJointRosterNeedsBothMajorities(t *testing.T) {
	a, b, c, d := Node{1, "a"}, Node{2, "b"}, Node{3, "c"}, Node{4, "d"}
	j := Bootstrap([]Node{a, b}).With(d, 1) // new {a b d}, old {a b}
	t0 := time.Unix(0, 0)
	rd := NewRound(1, Acquire, 2, j, t0, time.Second)
	rd.Add(Reply{Seq: 1, Epoch: 2, Voter: a, Granted: true})
	rd.Add(Reply{Seq: 1, Epoch: 2, Voter: d, Granted: true})
	if rd.Won() {
		t.Fatal("a and d are a majority of {a b d} but not of {a b}")
	}
	rd.Add(Reply{Seq: 1, Epoch: 2, Voter: b, Granted: true})
	if !rd.Won() {
		t.Fatal("a, b and d make both majorities")
	}
	rd2 := NewRound(2, Acquire, 2, j, t0, time.Second)
	rd2.Add(Reply{Seq: 2, Epoch: 2, Voter: b, Reason: ReasonPromised})
	if !rd2.Lost(t0) {
		t.Fatal("without b no majority of {a b} is possible")
	}
	if j.Contains(c) || !j.Contains(d) {
		t.Fatal("contains")
	}
}

func TestRosterChangesAndPersistence(t *testing.T) {
	a, b, c := Node{1, "a"}, Node{2, "b"}, Node{3, "c"}
	r1 := Bootstrap([]Node{c, a})
	if r1.String() != Bootstrap([]Node{a, c}).String() || r1.Majority() != 2 {
		t.Fatalf("bootstrap must not depend on order: %v", r1)
	}
	r2 := r1.With(b, 5)
	if r2.Version != 2 || len(r2.Voters) != 3 || r2.Voters[1] != b || r2.Majority() != 2 || !r2.Joint() || len(r2.Prev) != 2 {
		t.Fatalf("with: %v", r2)
	}
	f2 := r2.Final(5)
	if f2.Version != 3 || f2.Joint() || !f2.Newer(r2) || !r2.Newer(r1) {
		t.Fatalf("final: %v", f2)
	}
	r3 := f2.Without(a, 6).Final(6)
	if r3.Version != 5 || r3.Contains(a) || !r3.Contains(b) {
		t.Fatalf("without: %v", r3)
	}
	if !r1.With(b, 6).Newer(r1.With(b, 5)) {
		t.Fatal("a later term's proposal at the same version must be newer")
	}
	path := filepath.Join(t.TempDir(), "roster")
	s, err := OpenRosterStore(path)
	if err != nil || !s.Roster().IsZero() {
		t.Fatalf("fresh store: %v %v", s.Roster(), err)
	}
	if err := s.Save(r3); err != nil {
		t.Fatal(err)
	}
	s2, err := OpenRosterStore(path)
	if err != nil || s2.Roster().String() != r3.String() {
		t.Fatalf("reloaded %v, %v; want %v", s2.Roster(), err, r3)
	}
}

func FuzzDecodeRoster(f *testing.F) {
	good, _ := encodeRoster(Bootstrap([]Node{{1, "a"}, {2, "b"}, {3, "c"}}).With(Node{4, "d"}, 7))
	f.Add(good)
	f.Add([]byte("tenure-roster v1\n{}\ncrc32 00000000\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeRoster(data)
		if err != nil {
			return
		}
		if r.IsZero() || r.ClusterID == "" || len(r.Voters) == 0 {
			t.Fatalf("accepted an incomplete roster %+v", r)
		}
	})
}

// TestRefusedCandidateWaitsForAcquiringRound: a voter refusing a candidate
// for a promise to another candidate's acquire says so, with the
// promise's age, until that holder renews; the refused candidate then
// waits for the rest of the holder's budget, not the whole promise, while
// the holder's round may still be deciding, and for the whole promise
// once it renewed or its budget passed.
func TestRefusedCandidateWaitsForAcquiringRound(t *testing.T) {
	a, b, v := Node{1, "a"}, Node{2, "b"}, Node{3, "v"}
	r := Bootstrap([]Node{a, b, v})
	t0 := time.Unix(0, 0)
	ttl, budget := 10*time.Second, time.Second
	req := requester(r, ttl)
	vt := NewVoter(v, &memGrants{}, t0, VoterConfig{TTL: ttl, MaxTTL: ttl})
	if rep := vt.Handle(t0, req(Acquire, a, 1), r); !rep.Granted {
		t.Fatalf("first acquire refused: %+v", rep)
	}
	wait := func(at time.Duration, epoch uint64) (Reply, time.Duration) {
		rd := NewRound(1, Acquire, epoch, r, t0.Add(at), budget)
		q := req(Acquire, b, epoch)
		q.Seq = 1
		rep := vt.Handle(t0.Add(at), q, r)
		rd.Add(rep)
		return rep, rd.RetryAfter()
	}
	steps := []struct {
		at        time.Duration
		acquiring bool
		wait      time.Duration
	}{
		{300 * time.Millisecond, true, 700 * time.Millisecond}, // a's round may still be deciding
		{budget, true, ttl - budget},                           // a's budget is over: a won and has not renewed yet
	}
	for i, s := range steps {
		rep, got := wait(s.at, uint64(2+i))
		if rep.Reason != ReasonPromised || rep.Holder != a || rep.Acquiring != s.acquiring || got != s.wait {
			t.Fatalf("step %d at %v: %+v, wait %v; want promised to a (acquiring %v), wait %v", i, s.at, rep, got, s.acquiring, s.wait)
		}
	}
	if rep := vt.Handle(t0.Add(2*time.Second), req(Renew, a, 1), r); !rep.Granted || rep.Acquiring {
		t.Fatalf("renewal: %+v, want a grant of a settled promise", rep)
	}
	if rep, got := wait(2*time.Second+100*time.Millisecond, 4); rep.Acquiring || got != ttl-100*time.Millisecond {
		t.Fatalf("after a's renewal: %+v, wait %v; want the whole promise", rep, got)
	}
}

// TestOtherReleasesKeepResignedLeadersRelease: a voter remembers a
// resigned leader's release although other nodes release their own terms
// after it (failed candidates do, at a loaded start): the leader's
// renewal that the release overtook is still refused, and the voter still
// reports that release of the node it promised last. With one slot for
// the last release, a failed candidate's release made the voter grant
// the overtaken renewal and promise the resigned leader again for a TTL.
func TestOtherReleasesKeepResignedLeadersRelease(t *testing.T) {
	x, v := Node{1, "x"}, Node{3, "v"}
	r := Bootstrap([]Node{x, v})
	t0 := time.Unix(0, 0)
	ttl := time.Second
	req := requester(r, ttl)
	vt := NewVoter(v, &memGrants{}, t0, VoterConfig{TTL: ttl, MaxTTL: 3 * ttl})
	if rep := vt.Handle(t0, req(Acquire, x, 5), r); !rep.Granted {
		t.Fatalf("x's acquire refused: %s", rep.Reason)
	}
	vt.Handle(t0.Add(1), req(Release, x, 5), r) // x resigns
	// Failed candidates release epochs this voter never granted them;
	// more of them than it remembers.
	for i := range maxReleasers + 2 {
		c := Node{uint64(10 + i), fmt.Sprintf("c%d", i)}
		vt.Handle(t0.Add(2), req(Release, c, uint64(6+i)), r)
	}
	if rep := vt.Handle(t0.Add(3), req(Renew, x, 5), r); rep.Granted || rep.Reason != ReasonStaleEpoch {
		t.Errorf("x's renewal overtaken by its release: granted=%v reason=%q, want refused as %q", rep.Granted, rep.Reason, ReasonStaleEpoch)
	}
	if st := vt.Standing(t0.Add(3)); st.Released != x || st.ReleasedEpoch != 5 {
		t.Errorf("standing reports the release of %v epoch %d, want x's of epoch 5", st.Released, st.ReleasedEpoch)
	}
}

// TestRelayedReleaseFreesThePromise: a successor's acquire that relays the
// resigned holder's release is granted at once, although the holder's own
// release has not reached the voter; the holder's overtaken renewal is
// then refused, as after its own release. A relayed release that names
// another term or holder, or rides on a renewal, frees nothing.
func TestRelayedReleaseFreesThePromise(t *testing.T) {
	x, s, v := Node{1, "x"}, Node{2, "s"}, Node{3, "v"}
	r := Bootstrap([]Node{x, s, v})
	t0 := time.Unix(0, 0)
	ttl := time.Second
	req := func(k Kind, c Node, e uint64, rel *Released) Request {
		return Request{Kind: k, Candidate: c, Epoch: e, TTL: ttl, ClusterID: r.ClusterID, RosterVersion: r.Version, Relayed: rel}
	}
	vt := NewVoter(v, &memGrants{}, t0, VoterConfig{TTL: ttl, MaxTTL: 3 * ttl})
	steps := []struct {
		req    Request
		grant  bool
		reason Reason
	}{
		{req(Acquire, x, 5, nil), true, ""},
		{req(Acquire, s, 6, &Released{Holder: x, Epoch: 4}), false, ReasonPromised}, // another term
		{req(Acquire, s, 6, &Released{Holder: s, Epoch: 5}), false, ReasonPromised}, // another holder
		{req(Acquire, s, 6, &Released{Holder: Node{}, Epoch: 5}), false, ReasonPromised},
		{req(Renew, s, 5, &Released{Holder: x, Epoch: 5}), false, ReasonPromised}, // only an acquire relays
		{req(Renew, x, 5, nil), true, ""},                                         // x still holds its promise
		{req(Acquire, s, 6, &Released{Holder: x, Epoch: 5}), true, ""},
		{req(Renew, x, 5, nil), false, ReasonPromised}, // promised to s now
		{req(Release, s, 6, nil), true, ""},
		{req(Renew, x, 5, nil), false, ReasonStaleEpoch}, // overtaken by x's release
	}
	for i, st := range steps {
		rep := vt.Handle(t0.Add(time.Duration(i)), st.req, r)
		if rep.Granted != st.grant || rep.Reason != st.reason {
			t.Fatalf("step %d %v %s epoch %d relaying %+v: granted=%v reason=%q, want %v %q",
				i, st.req.Kind, st.req.Candidate.Name, st.req.Epoch, st.req.Relayed, rep.Granted, rep.Reason, st.grant, st.reason)
		}
	}
	if st := vt.Standing(t0.Add(time.Second / 2)); st.Released != s || st.ReleasedEpoch != 6 {
		t.Errorf("standing reports the release of %v epoch %d, want s's of epoch 6", st.Released, st.ReleasedEpoch)
	}
}

// TestVoterRefusesAnotherInstance: a voter promising a node's name and ID
// to one agent process refuses another process with that name and ID
// (two agents given one name) until the promise ends, for an acquire, a
// renewal and a release alike, and a release it refuses leaves the
// holder's renewals granted; a restart that names the holder's process
// as its Previous, a request naming no process (an older agent) and the
// same process's next term are granted as before.
func TestVoterRefusesAnotherInstance(t *testing.T) {
	x := Node{3, "x"}
	r := Bootstrap([]Node{x, {1, "a"}, {2, "b"}})
	t0 := time.Unix(0, 0)
	ttl := time.Second
	req := func(k Kind, e, instance, previous uint64) Request {
		return Request{Kind: k, Candidate: x, Epoch: e, TTL: ttl, ClusterID: r.ClusterID, RosterVersion: r.Version,
			Instance: instance, Previous: previous}
	}
	steps := []struct {
		at     time.Duration
		req    Request
		grant  bool
		reason Reason
	}{
		{0, req(Acquire, 1, 11, 0), true, ""},
		{10, req(Acquire, 2, 22, 0), false, ReasonOtherInstance}, // x's twin
		{20, req(Acquire, 2, 22, 7), false, ReasonOtherInstance}, // after another run than 11
		{30, req(Renew, 2, 22, 0), false, ReasonOtherInstance},   // nor joins as a renewal
		{40, req(Release, 2, 22, 0), true, ""},                   // a release is always answered...
		{50, req(Renew, 1, 11, 0), true, ""},                     // ...but this one changed nothing
		{60, req(Acquire, 2, 11, 0), true, ""},                   // the holder's own next term
		{70, req(Acquire, 3, 33, 11), true, ""},                  // a restart on 11's data dir
		{80, req(Acquire, 4, 0, 0), true, ""},                    // an older agent: any instance
		{90, req(Acquire, 5, 44, 0), true, ""},                   // the promise names no instance
		{2000, req(Acquire, 6, 55, 0), true, ""},                 // 44's promise has ended
		{2010, req(Renew, 6, 44, 0), false, ReasonOtherInstance}, // 44's late renewal
		{2020, req(Release, 6, 44, 0), true, ""},                 // 44's late release...
		{2030, req(Renew, 6, 55, 0), true, ""},                   // ...leaves 55's term
	}
	vt := NewVoter(Node{1, "a"}, &memGrants{}, t0, VoterConfig{TTL: ttl, MaxTTL: 3 * ttl})
	for i, st := range steps {
		rep := vt.Handle(t0.Add(st.at*time.Millisecond), st.req, r)
		if rep.Granted != st.grant || rep.Reason != st.reason {
			t.Fatalf("step %d: %v epoch %d from instance %d (previous %d): granted=%v reason=%q, want %v %q",
				i, st.req.Kind, st.req.Epoch, st.req.Instance, st.req.Previous, rep.Granted, rep.Reason, st.grant, st.reason)
		}
	}
}
