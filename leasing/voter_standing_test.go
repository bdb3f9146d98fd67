package leasing

import (
	"testing"
	"time"
)

// TestVoterStanding: a voter reports whom it promises, for which term,
// when the holder last renewed, and from when it may grant a new term: the
// later of its promise's end and its restart hold; after a release, the
// term released and no promise.
func TestVoterStanding(t *testing.T) {
	a, v := Node{1, "a"}, Node{3, "v"}
	r := Bootstrap([]Node{a, v})
	t0 := time.Unix(0, 0)
	ttl := time.Second
	req := func(k Kind, e uint64) Request { return requester(r, ttl)(k, a, e) }
	// Restarted: it holds for a TTL and grants nothing meanwhile.
	vt := NewVoter(v, &memGrants{}, t0, VoterConfig{TTL: ttl, MaxTTL: 3 * ttl, Restarted: true})
	if st := vt.Standing(t0); !st.Holder.IsZero() || !st.Free.Equal(t0.Add(ttl)) {
		t.Fatalf("restarting voter: %+v, want no holder, free after its hold", st)
	}
	t1 := t0.Add(ttl)
	if rep := vt.Handle(t1, req(Acquire, 4), r); !rep.Granted {
		t.Fatalf("acquire refused: %s", rep.Reason)
	}
	t2 := t1.Add(300 * time.Millisecond)
	if rep := vt.Handle(t2, req(Renew, 4), r); !rep.Granted {
		t.Fatalf("renewal refused: %s", rep.Reason)
	}
	now := t2.Add(100 * time.Millisecond)
	st := vt.Standing(now)
	if st.Holder != a || st.Epoch != 4 || !st.Granted.Equal(t2) || !st.Expiry.Equal(t2.Add(ttl)) || !st.Free.Equal(st.Expiry) {
		t.Fatalf("after a renewal: %+v, want a's term 4, renewed at %v, free at its expiry", st, t2)
	}
	if st := vt.Standing(t2.Add(ttl)); !st.Holder.IsZero() || !st.Free.Equal(t2.Add(ttl)) {
		t.Fatalf("after the promise ran out: %+v, want no holder, free now", st)
	}
	vt.Handle(now, req(Release, 4), r)
	if st := vt.Standing(now); !st.Holder.IsZero() || !st.Free.Equal(now) || st.Released != a || st.ReleasedEpoch != 4 {
		t.Fatalf("after the release: %+v, want no holder, free now, term 4 of a released", st)
	}
}
