package leasing

import (
	"testing"
	"time"
)

// TestLateMessagesOfEarlierTermKeepPromise: a leader's renewal and release
// of an earlier term of its own that arrive late (after the voter granted
// its later term) neither lower the promise to that earlier term nor drop
// it: the leader of the later term counts on it.
func TestLateMessagesOfEarlierTermKeepPromise(t *testing.T) {
	a, b, v := Node{1, "a"}, Node{2, "b"}, Node{3, "v"}
	r := Bootstrap([]Node{a, b, v})
	t0 := time.Unix(0, 0)
	ttl := time.Second
	req := func(k Kind, e uint64) Request { return requester(r, ttl)(k, a, e) }
	vt := NewVoter(v, &memGrants{}, t0, VoterConfig{TTL: ttl, MaxTTL: 3 * ttl})
	for i, s := range []struct {
		req   Request
		grant bool
	}{
		{req(Acquire, 5), true},
		{req(Acquire, 7), true}, // a's next term (its lease of 5 lapsed)
		{req(Renew, 5), false},  // late: a renewal sent in term 5
		{req(Release, 5), true}, // late: term 5's release
	} {
		if rep := vt.Handle(t0.Add(time.Duration(i)*time.Millisecond), s.req, r); rep.Granted != s.grant {
			t.Fatalf("step %d %v epoch %d: granted=%v (%q), want %v", i, s.req.Kind, s.req.Epoch, rep.Granted, rep.Reason, s.grant)
		}
	}
	now := t0.Add(10 * time.Millisecond)
	if h, until, ok := vt.Promise(now); !ok || h != a || until.Sub(now) < ttl-20*time.Millisecond || vt.epoch != 7 {
		t.Fatalf("promise after late messages of term 5: %v until %v (%v), epoch %d; want a's term 7 for about a TTL", h, until, ok, vt.epoch)
	}
}

// TestFloorCountsReleasedRounds: a release of a failed round this voter
// never granted raises its floor above its stored grant (a later acquire
// at that epoch is refused as stale), and Floor, which the agent reports
// to successors, says so, as the refusal's Highest does.
func TestFloorCountsReleasedRounds(t *testing.T) {
	a, b, v := Node{1, "a"}, Node{2, "b"}, Node{3, "v"}
	r := Bootstrap([]Node{a, b, v})
	t0 := time.Unix(0, 0)
	ttl := time.Second
	req := requester(r, ttl)
	vt := NewVoter(v, &memGrants{}, t0, VoterConfig{TTL: ttl, MaxTTL: 3 * ttl})
	if rep := vt.Handle(t0, req(Acquire, a, 3), r); !rep.Granted {
		t.Fatalf("acquire of epoch 3 refused: %q", rep.Reason)
	}
	vt.Handle(t0, req(Release, b, 4), r) // b's round 4, refused elsewhere, given up
	if got := vt.Floor(); got != 4 {
		t.Fatalf("Floor() = %d after the release of round 4 (stored 3), want 4", got)
	}
	now := t0.Add(2 * ttl) // a's promise has run out
	if rep := vt.Handle(now, req(Acquire, a, 4), r); rep.Granted || rep.Reason != ReasonStaleEpoch || rep.Highest != 4 {
		t.Fatalf("acquire of the released epoch 4: granted=%v reason=%q highest=%d; want refused as stale, highest 4",
			rep.Granted, rep.Reason, rep.Highest)
	}
	if rep := vt.Handle(now, req(Acquire, a, 5), r); !rep.Granted || vt.Floor() != 5 {
		t.Fatalf("acquire of epoch 5: granted=%v (%q), floor %d; want granted, floor 5", rep.Granted, rep.Reason, vt.Floor())
	}
}
