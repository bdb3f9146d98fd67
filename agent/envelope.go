package agent

import (
	"fmt"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/internal/wire"
	"github.com/tenurehq/tenure/leasing"
)

// peerVersion is the version of the peer message envelope.
const peerVersion = 1

// envelope is what travels on the peer transport, in both directions. Exactly
// one field is set: a request, or the reply to one.
type envelope struct {
	Version    uint8            `msgpack:"v"`
	Bully      *bully.Message   `msgpack:"bully,omitempty"`
	Lease      *leasing.Request `msgpack:"lease,omitempty"`
	LeaseReply *leasing.Reply   `msgpack:"lease_reply,omitempty"`
	// RosterFetch asks for the receiver's roster; Roster carries one.
	RosterFetch bool            `msgpack:"roster_fetch,omitempty"`
	Roster      *leasing.Roster `msgpack:"roster,omitempty"`
}

// decodeEnvelope decodes and checks a peer envelope.
func decodeEnvelope(b []byte) (envelope, error) {
	var env envelope
	if err := wire.Unmarshal(b, &env); err != nil {
		return env, fmt.Errorf("agent: peer message: %w", err)
	}
	if env.Version != peerVersion {
		return env, fmt.Errorf("agent: peer message version %d, want %d", env.Version, peerVersion)
	}
	if m := env.Bully; m != nil && (m.Type < bully.MsgElection || m.Type > bully.MsgInfo || m.From.Name == "") {
		return env, fmt.Errorf("agent: malformed election message %v", *m)
	}
	if r := env.Lease; r != nil && (r.Kind < leasing.Acquire || r.Kind > leasing.Release || r.Candidate.Name == "") {
		return env, fmt.Errorf("agent: malformed lease request %+v", *r)
	}
	return env, nil
}

func encodeEnvelope(env envelope) ([]byte, error) {
	env.Version = peerVersion
	return wire.Marshal(env)
}

func toLeasing(n bully.Node) leasing.Node { return leasing.Node{ID: n.ID, Name: n.Name} }

func toBully(n leasing.Node) bully.Node { return bully.Node{ID: n.ID, Name: n.Name} }
