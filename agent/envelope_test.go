package agent

import (
	"testing"

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
		{ForceLeave: "c"},
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
		if r := env.Lease; r != nil && (r.Candidate.Name == "" || r.Kind < leasing.Acquire || r.Kind > leasing.Release) {
			t.Fatalf("accepted a malformed lease request %+v", *r)
		}
	})
}
