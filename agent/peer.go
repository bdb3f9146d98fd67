package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/gossip"
	"github.com/tenurehq/tenure/leasing"
)

// sendTimeout bounds one outbound peer message, but a renewal
// (renewTimeout) and an announcement (announceTimeout).
const sendTimeout = 2 * time.Second

// renewTimeout bounds a renewal request: its answer may extend the lease
// until the lease's validity counted from its send has passed
// (core.extendByGrants), so the call waits that long, or sendTimeout if
// longer. Bounded by sendTimeout, no round trip over 2 s renewed a lease
// whatever its TTL: with a 10 s TTL and one-way delays of 1.5 s ± 0.75 s
// on every link, the leader's lease ended at its first renewal and no
// node led until the delays ended (16 s).
func (a *Agent) renewTimeout() time.Duration {
	return max(sendTimeout, a.cfg.leaseTiming().Validity())
}

// announceTimeout bounds a COORDINATOR. A new term is announced to every
// member at once, most of them over new connections, and on a loaded host
// their handshakes outlast sendTimeout: while 100 agents started on two
// cores, 80 of the first leader's 99 COORDINATORs failed after 2 s with
// "i/o timeout", and most members learned the term only from the
// announcements 3 and 6 s later, the handshakes having finished in the
// meantime. An announcement may wait for its connection's handshake
// (gossip.DefaultDialTimeout) and an exchange after it; its reply carries
// at most a claim (bully step 5), which may as well come late.
const announceTimeout = gossip.DefaultDialTimeout + time.Second

var (
	errStopped  = errors.New("agent: stopped")
	errIsolated = errors.New("agent: isolated (fault injection)")
)

// handlePeer serves one peer request: the driver hands it to the core and
// returns the core's reply, if any.
func (a *Agent) handlePeer(ctx context.Context, req []byte) ([]byte, error) {
	if a.isolated.Load() {
		return nil, errIsolated
	}
	env, err := decodeEnvelope(req)
	if err != nil {
		return nil, err
	}
	a.counts.add("recv." + env.kind())
	a.counts.addN("recv_bytes."+env.kind(), uint64(len(req)))
	if m := env.Bully; m != nil && m.To != a.self() {
		return nil, fmt.Errorf("agent: message for %s reached %s", m.To, a.self())
	}
	var reply *envelope
	switch {
	case env.Transfer != "": // it asks another member first, off the driver
		var r *transferReply
		if r, err = a.serveTransfer(ctx, env.Transfer); err == nil {
			reply = &envelope{TransferReply: r}
		}
	case env.CanTake: // it may ask the voters first, off the driver
		var r *canTakeReply
		if r, err = a.serveCanTake(ctx, env.CanTakeWithin); err == nil {
			reply = &envelope{CanTakeReply: r}
		}
	default:
		err = a.do(ctx, func() {
			now := a.cfg.Clock.Now()
			if reply = a.core.receive(now, env); reply == nil {
				reply = &envelope{}
			}
			a.core.stampWake(now, reply)
			a.flush()
		})
	}
	if err != nil {
		return nil, err
	}
	if reply == nil {
		reply = &envelope{}
	}
	return encodeEnvelope(*reply)
}

// send delivers msg in the background; a reply is fed back to the core.
// Lost messages are tolerated by the protocol; a failure is reported to the
// core (sendFailed), which names the peers it cannot reach in its reasons.
// It runs on the driver goroutine.
func (a *Agent) send(msg outMsg, sent *sync.WaitGroup) {
	if a.isolated.Load() {
		return
	}
	addr, ok := a.peerAddr(msg.to)
	if !ok {
		a.log.Debug("no peer address", "to", msg.to.Name)
		a.core.sendFailed(a.cfg.Clock.Now(), msg.to, errNoPeerAddr)
		return
	}
	body, err := encodeEnvelope(msg.env)
	if err != nil {
		a.log.Error("encode peer message", "err", err)
		return
	}
	timeout, finish := sendTimeout, func() {}
	if r := msg.env.Lease; r != nil && r.Kind == leasing.Renew {
		timeout = a.renewTimeout()
	}
	if m := msg.env.Bully; m != nil && m.Type == bully.MsgCoordinator {
		var ok bool
		if finish, ok = a.announcing.start(*m); !ok {
			a.counts.add("announce.repeat_skipped")
			return
		}
		timeout = announceTimeout
	}
	kind := msg.env.kind()
	a.countSent(kind, body)
	a.sends.Add(1)
	sent.Add(1)
	go func() {
		defer a.sends.Done()
		defer sent.Done()
		defer finish()
		ctx, cancel := context.WithTimeout(a.ctx, timeout)
		defer cancel()
		a.exchange(ctx, msg.to, addr, body, kind)
	}()
}

// exchange sends body, a message of kind, to the peer `to` at addr and
// feeds its reply to the core (deliverReply), which it returns with ok
// set once delivered. A failure is reported to the core
// (reportSendFailure), unless ctx was cancelled: then the caller no
// longer wanted the answer.
func (a *Agent) exchange(ctx context.Context, to bully.Node, addr string, body []byte, kind string) (env envelope, ok bool) {
	began := time.Now()
	resp, retried, err := a.peers.CallRetried(ctx, addr, body)
	if err != nil {
		a.log.Debug("peer message not delivered", "to", to.Name, "kind", kind, "err", err)
		if !errors.Is(ctx.Err(), context.Canceled) {
			a.reportSendFailure(to, err)
		}
		return envelope{}, false
	}
	took := time.Since(began)
	a.log.Debug("peer message answered", "to", to.Name, "kind", kind, "took", took, "retransmitted", retried)
	return a.deliverReply(resp, to, took, retried)
}

// reportSendFailure tells the core, on the driver goroutine, that a
// message to `to` was not delivered. It runs on a send goroutine.
func (a *Agent) reportSendFailure(to bully.Node, err error) {
	if a.ctx.Err() != nil {
		return // stopping: the failures are ours
	}
	_ = a.do(a.ctx, func() { a.core.sendFailed(a.cfg.Clock.Now(), to, err) })
}

// deliverReply feeds a peer's reply to the core, and tells it that the
// peer answered after took (no round trip when retried, the kernel having
// retransmitted part of the exchange, or when the peer says it woke from
// a freeze during the call); it returns the reply. A reply from another
// node than the one called (its address now belongs to another agent)
// counts as a failure, as one that does not decode does: ok is false.
func (a *Agent) deliverReply(resp []byte, to bully.Node, took time.Duration, retried bool) (envelope, bool) {
	env, err := decodeEnvelope(resp)
	if err != nil {
		a.log.Warn("bad peer reply", "from", to.Name, "err", err)
		a.reportSendFailure(to, fmt.Errorf("bad reply: %w", err))
		return envelope{}, false
	}
	from := to
	switch {
	case env.Bully != nil:
		from = env.Bully.From
	case env.LeaseReply != nil:
		from = toBully(env.LeaseReply.Voter)
	case env.Floor != nil:
		from = env.Floor.From
	}
	if from != to {
		a.log.Warn("peer reply from the wrong node", "want", to, "got", from, "kind", env.kind())
		a.reportSendFailure(to, fmt.Errorf("the agent at its peer address is %s", from.Name))
		return envelope{}, false
	}
	empty := env.bare()
	if !empty {
		a.counts.add("reply." + env.kind())
	}
	_ = a.do(a.ctx, func() {
		cleared := a.core.peerReplied(a.cfg.Clock.Now(), to, took, retried || env.frozeWithin(took))
		if empty && !cleared {
			return
		}
		if !empty {
			a.core.receive(a.cfg.Clock.Now(), env)
		}
		a.flush()
	})
	return env, true
}

// call sends req to n over the peer transport, outside the driver, and
// returns n's decoded answer and the address it used (for errors). It
// fails with errNoPeerAddr for a member gossip lists without a peer
// address, and with errBadReply for an answer that does not decode.
func (a *Agent) call(ctx context.Context, n bully.Node, req envelope) (envelope, string, error) {
	addr, ok := a.peerAddr(n)
	if !ok {
		return envelope{}, "", errNoPeerAddr
	}
	body, err := encodeEnvelope(req)
	if err != nil {
		return envelope{}, addr, err
	}
	resp, err := a.peers.Call(ctx, addr, body)
	if err != nil {
		return envelope{}, addr, err
	}
	env, err := decodeEnvelope(resp)
	if err != nil {
		return envelope{}, addr, fmt.Errorf("%w: %w", errBadReply, err)
	}
	return env, addr, nil
}

// peerAddr looks up the peer transport address gossip advertises for n:
// in the book of the last membership sync, else (a member gossip reported
// since) in gossip's list.
func (a *Agent) peerAddr(n bully.Node) (string, bool) {
	if addr, ok := a.book.lookup(n); ok {
		return addr, true
	}
	for _, m := range a.members.Members() {
		if m.Name == n.Name && m.ID == n.ID && m.PeerAddr != "" {
			return m.PeerAddr, true
		}
	}
	return "", false
}

// resignForShutdown makes a leader resign, past a natural successor that
// does not answer (askSuccessor), and waits (bounded by ctx) until
// the local work of its term has stopped and its RESIGN and release
// messages are delivered, so the next leader starts at once.
func (a *Agent) resignForShutdown(ctx context.Context) {
	var sent *sync.WaitGroup
	var w *stopWait
	if err := a.askSuccessor(ctx); err != nil {
		a.log.Warn("resigning for shutdown without asking the successor", "err", err)
	}
	err := a.do(ctx, func() {
		if a.core.resign(a.cfg.Clock.Now()) == nil {
			sent, w = a.flush(), a.stopping
		}
	})
	if err != nil || sent == nil {
		return
	}
	if w != nil && !waitStop(ctx, w) {
		a.log.Warn("shutting down before the term's local work had stopped and its release was delivered")
		return
	}
	waitSent(ctx, sent)
	a.log.Info("resigned leadership for shutdown")
}

// announcements tracks the COORDINATORs in flight, by receiver, so that a
// leader's periodic announcement is not sent again to a member that has
// not yet taken the last one (its connection still being set up): a second
// call would dial a second connection. An announcement of another term
// goes at once.
type announcements struct {
	mu       sync.Mutex
	inFlight map[string]*announcement // by receiver name
}

// announcement is one COORDINATOR in flight.
type announcement struct {
	leader bully.Node
	term   uint64
}

// start registers m, a COORDINATOR, as in flight. It returns false when
// the same term's announcement to the same node is in flight already;
// otherwise finish, to be called when the call has ended.
func (s *announcements) start(m bully.Message) (finish func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.inFlight[m.To.Name]; cur != nil && cur.leader == m.Leader && cur.term == m.Term {
		return nil, false
	}
	if s.inFlight == nil {
		s.inFlight = map[string]*announcement{}
	}
	an := &announcement{leader: m.Leader, term: m.Term}
	s.inFlight[m.To.Name] = an
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.inFlight[m.To.Name] == an {
			delete(s.inFlight, m.To.Name)
		}
	}, true
}
