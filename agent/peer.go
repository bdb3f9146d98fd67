package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/internal/wire"
)

// peerVersion is the version of the peer message envelope.
const peerVersion = 1

// sendTimeout bounds one outbound peer message.
const sendTimeout = 2 * time.Second

var errStopped = errors.New("agent: stopped")

// envelope is what travels on the peer transport in both directions.
type envelope struct {
	Version uint8          `msgpack:"v"`
	Bully   *bully.Message `msgpack:"bully,omitempty"`
}

// handlePeer serves one peer request: it hands the message to the driver and
// returns the machine's reply, if any.
func (a *Agent) handlePeer(ctx context.Context, req []byte) ([]byte, error) {
	msg, err := decodePeer(req)
	if err != nil {
		return nil, err
	}
	if msg.To != a.self() {
		return nil, fmt.Errorf("agent: message for %s reached %s", msg.To, a.self())
	}
	var reply *bully.Message
	err = a.do(ctx, func() {
		reply = a.machine.Step(a.cfg.Clock.Now(), *msg)
		a.flush()
	})
	if err != nil {
		return nil, err
	}
	return wire.Marshal(envelope{Version: peerVersion, Bully: reply})
}

// decodePeer decodes and checks a peer envelope; a nil message is an error.
func decodePeer(b []byte) (*bully.Message, error) {
	var env envelope
	if err := wire.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("agent: peer message: %w", err)
	}
	if env.Version != peerVersion {
		return nil, fmt.Errorf("agent: peer message version %d, want %d", env.Version, peerVersion)
	}
	msg := env.Bully
	if msg == nil {
		return nil, nil
	}
	if msg.Type < bully.MsgElection || msg.Type > bully.MsgInfo || msg.From.Name == "" {
		return nil, fmt.Errorf("agent: malformed peer message %v", msg)
	}
	return msg, nil
}

// send delivers msg in the background; a reply is fed back to the machine.
// Lost messages are tolerated by the protocol, so failures are only logged.
func (a *Agent) send(msg bully.Message, sent *sync.WaitGroup) {
	addr, ok := a.peerAddr(msg.To)
	if !ok {
		a.log.Debug("no peer address", "to", msg.To.Name, "msg", msg.Type)
		return
	}
	body, err := wire.Marshal(envelope{Version: peerVersion, Bully: &msg})
	if err != nil {
		a.log.Error("encode peer message", "err", err)
		return
	}
	a.sends.Add(1)
	sent.Add(1)
	go func() {
		defer a.sends.Done()
		defer sent.Done()
		ctx, cancel := context.WithTimeout(a.ctx, sendTimeout)
		defer cancel()
		resp, err := a.peers.Call(ctx, addr, body)
		if err != nil {
			a.log.Debug("peer message not delivered", "to", msg.To.Name, "msg", msg.Type, "err", err)
			return
		}
		a.deliverReply(resp, msg)
	}()
}

func (a *Agent) deliverReply(resp []byte, sent bully.Message) {
	reply, err := decodePeer(resp)
	if err != nil {
		a.log.Warn("bad peer reply", "from", sent.To.Name, "err", err)
		return
	}
	if reply == nil {
		return
	}
	if reply.From != sent.To {
		a.log.Warn("peer reply from the wrong node", "want", sent.To, "got", reply.From)
		return
	}
	_ = a.do(a.ctx, func() {
		a.machine.Step(a.cfg.Clock.Now(), *reply)
		a.flush()
	})
}

// peerAddr looks up the peer transport address gossip advertises for n.
func (a *Agent) peerAddr(n bully.Node) (string, bool) {
	for _, m := range a.members.Members() {
		if m.Name == n.Name && m.ID == n.ID && m.PeerAddr != "" {
			return m.PeerAddr, true
		}
	}
	return "", false
}

// resignForShutdown makes a leader resign and waits (bounded by ctx) until
// its RESIGN messages are delivered, so the next leader starts at once.
func (a *Agent) resignForShutdown(ctx context.Context) {
	var sent *sync.WaitGroup
	err := a.do(ctx, func() {
		if a.machine.Resign(a.cfg.Clock.Now()) == nil {
			sent = a.flush()
		}
	})
	if err != nil || sent == nil {
		return
	}
	done := make(chan struct{})
	go func() { sent.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	a.log.Info("resigned leadership for shutdown")
}
