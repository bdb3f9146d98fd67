package agent

import (
	"bytes"
	"testing"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/leasing"
)

// FuzzDecodeEnvelope feeds arbitrary bytes to the peer message decoder: it
// must never panic, and what it accepts must be well-formed.
func FuzzDecodeEnvelope(f *testing.F) {
	for _, env := range []envelope{
		{Bully: &bully.Message{Type: bully.MsgElection, From: bully.Node{ID: 1, Name: "a"}, To: bully.Node{ID: 2, Name: "b"}}},
		{Lease: &leasing.Request{Kind: leasing.Acquire, Candidate: leasing.Node{ID: 1, Name: "a"}, Epoch: 3}},
		{LeaseReply: &leasing.Reply{Voter: leasing.Node{ID: 2, Name: "b"}, Granted: true}},
		{RosterFetch: true},
		{Roster: &leasing.Roster{ClusterID: "k", Version: 1, Voters: []leasing.Node{{ID: 2, Name: "b"}}},
			Follows: &followed{Leader: bully.Node{ID: 3, Name: "c"}, Term: 5}},
		{ForceLeave: "c"},
		{Transfer: "c"},
		{TransferReply: &transferReply{Code: "not_found", Error: "agent: transfer: no such live member"}},
		{CanTake: true},
		{CanTake: true, CanTakeWithin: 200 * time.Millisecond},
		{CanTakeReply: &canTakeReply{Refused: "it cannot write its data dir: no space left on device"}},
		{Bully: &bully.Message{Type: bully.MsgResign, From: bully.Node{ID: 1, Name: "a"}, To: bully.Node{ID: 2, Name: "b"},
			Term: 4, Hold: true, HoldFor: 1 << 40, Successor: bully.Node{ID: 3, Name: "c"}}},
		{Bully: &bully.Message{Type: bully.MsgCoordinator, From: bully.Node{ID: 3, Name: "c"}, To: bully.Node{ID: 2, Name: "b"},
			Leader: bully.Node{ID: 3, Name: "c"}, Term: 5, Chosen: true}},
		{Bully: &bully.Message{Type: bully.MsgResign, From: bully.Node{ID: 1, Name: "a"}, To: bully.Node{ID: 2, Name: "b"}, Term: 4},
			Released: &leasing.Released{Holder: leasing.Node{ID: 1, Name: "a"}, Epoch: 4}},
		{Lease: &leasing.Request{Kind: leasing.Acquire, Candidate: leasing.Node{ID: 2, Name: "b"}, Epoch: 5,
			Relayed: &leasing.Released{Holder: leasing.Node{ID: 1, Name: "a"}, Epoch: 4}}},
	} {
		b, err := encodeEnvelope(env)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := decodeEnvelope(data)
		if err != nil {
			return
		}
		if m := env.Bully; m != nil && (m.From.Name == "" || m.Type < bully.MsgElection || m.Type > bully.MsgInfo) {
			t.Fatalf("accepted a malformed election message %+v", *m)
		}
		if r := env.Lease; r != nil && (r.Candidate.Name == "" || r.Kind < leasing.Acquire || r.Kind > leasing.Release ||
			r.Relayed != nil && (r.Kind != leasing.Acquire || r.Relayed.Holder.Name == "" || r.Relayed.Epoch == 0)) {
			t.Fatalf("accepted a malformed lease request %+v", *r)
		}
		if r := env.Released; r != nil && (r.Holder.Name == "" || r.Epoch == 0 || env.Bully == nil || env.Bully.Type != bully.MsgResign) {
			t.Fatalf("accepted a malformed release %+v", *r)
		}
		if f := env.Follows; f != nil && (f.Leader.Name == "" || f.Term == 0) {
			t.Fatalf("accepted a malformed relayed leader %+v", *f)
		}
	})
}

// TestHandoverFieldsRoundTrip: a RESIGN's hold and successor and a
// COORDINATOR's chosen mark survive the peer encoding; a plain message
// carries none of them (their keys are omitted).
func TestHandoverFieldsRoundTrip(t *testing.T) {
	a, c := bully.Node{ID: 1, Name: "a"}, bully.Node{ID: 3, Name: "c"}
	for _, m := range []bully.Message{
		{Type: bully.MsgResign, From: a, To: c, Term: 4, Hold: true, HoldFor: 90 * time.Second, Successor: c},
		{Type: bully.MsgCoordinator, From: c, To: a, Leader: c, Term: 5, Chosen: true},
		{Type: bully.MsgResign, From: a, To: c, Term: 4},
	} {
		b, err := encodeEnvelope(envelope{Bully: &m})
		if err != nil {
			t.Fatal(err)
		}
		env, err := decodeEnvelope(b)
		if err != nil || env.Bully == nil || *env.Bully != m {
			t.Fatalf("%v came back as %+v (%v)", m, env.Bully, err)
		}
		plain := !m.Hold && !m.Chosen && m.Successor.IsZero()
		if has := bytes.Contains(b, []byte("successor")) || bytes.Contains(b, []byte("chosen")) || bytes.Contains(b, []byte("hold")); plain && has {
			t.Fatalf("a plain %v encodes hand-over keys: %q", m, b)
		}
	}
}

// TestReleasesTravelOnlyWhereTheyBelong: a release rides on a RESIGN and is
// relayed on an acquire, and survives the peer encoding there; one on any
// other message, or naming no holder or term, is refused as malformed.
func TestReleasesTravelOnlyWhereTheyBelong(t *testing.T) {
	a, b := bully.Node{ID: 1, Name: "a"}, bully.Node{ID: 2, Name: "b"}
	rel := &leasing.Released{Holder: toLeasing(a), Epoch: 4}
	resign := &bully.Message{Type: bully.MsgResign, From: a, To: b, Term: 4}
	acquire := func(k leasing.Kind, r *leasing.Released) *leasing.Request {
		return &leasing.Request{Kind: k, Candidate: toLeasing(b), Epoch: 5, Relayed: r}
	}
	for _, env := range []envelope{{Bully: resign, Released: rel}, {Lease: acquire(leasing.Acquire, rel)}} {
		b, err := encodeEnvelope(env)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeEnvelope(b)
		switch {
		case err != nil:
			t.Fatalf("%+v: %v", env, err)
		case got.Released != nil && *got.Released != *rel, got.Lease != nil && *got.Lease.Relayed != *rel,
			got.Released == nil && got.Lease == nil:
			t.Fatalf("%+v came back as %+v", env, got)
		}
	}
	for _, env := range []envelope{
		{Bully: &bully.Message{Type: bully.MsgCoordinator, From: a, To: b, Leader: a, Term: 4}, Released: rel},
		{Released: rel},
		{Bully: resign, Released: &leasing.Released{Holder: toLeasing(a)}},
		{Bully: resign, Released: &leasing.Released{Epoch: 4}},
		{Lease: acquire(leasing.Renew, rel)},
		{Lease: acquire(leasing.Release, rel)},
		{Lease: acquire(leasing.Acquire, &leasing.Released{Epoch: 4})},
	} {
		b, err := encodeEnvelope(env)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeEnvelope(b); err == nil {
			t.Errorf("accepted %+v", env)
		}
	}
}

// TestWakeStampRoundTrip: an answer stamped as sent soon after its
// sender's freeze keeps the stamp through the peer encoding, stays an
// empty answer when it carries nothing else, and marks a call as held by
// the freeze only if the call began before the wake-up; an unstamped
// answer (or one from an older release) marks none.
func TestWakeStampRoundTrip(t *testing.T) {
	const ms = time.Millisecond
	c := &core{cfg: coreConfig{Lease: leasing.DefaultTiming().WithTTL(2 * time.Second)}}
	now := time.Unix(1000, 0)
	c.ticked, c.woke = now.Add(-40*ms), now.Add(-300*ms)
	reply := envelope{}
	c.stampWake(now, &reply)
	b, err := encodeEnvelope(reply)
	if err != nil {
		t.Fatal(err)
	}
	env, err := decodeEnvelope(b)
	if err != nil || env.WokeMS != 301 || !env.bare() {
		t.Fatalf("an empty answer 300ms after a wake-up came back as %+v (%v), want woke_ms 301 and bare", env, err)
	}
	for _, tc := range []struct {
		took time.Duration
		want bool
	}{{200 * ms, false}, {300 * ms, false}, {301 * ms, true}, {2 * time.Second, true}} {
		if got := env.frozeWithin(tc.took); got != tc.want {
			t.Errorf("a call that took %v, the peer woke 300ms before answering: frozeWithin = %v, want %v", tc.took, got, tc.want)
		}
	}
	c.ticked = now.Add(-time.Second) // stalled: the tick that finds the freeze has not run
	stalled := envelope{}
	c.stampWake(now, &stalled)
	if stalled.WokeMS != 1 || !stalled.frozeWithin(ms) {
		t.Fatalf("an answer while stalled: woke_ms %d, want 1 (just woken)", stalled.WokeMS)
	}
	c.ticked, c.woke = now, now.Add(-wakeHorizon)
	old := envelope{}
	if c.stampWake(now, &old); old.WokeMS != 0 || old.frozeWithin(time.Hour) {
		t.Fatalf("an answer %v after a wake-up: woke_ms %d, want none", wakeHorizon, old.WokeMS)
	}
}
