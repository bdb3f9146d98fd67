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
	req := func(k Kind, e uint64) Request {
		return Request{Kind: k, Candidate: a, Epoch: e, TTL: ttl, ClusterID: r.ClusterID, RosterVersion: r.Version}
	}
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
