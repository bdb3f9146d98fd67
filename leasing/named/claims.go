package named

import (
	"fmt"
	"sort"
	"time"

	"github.com/tenurehq/tenure/leasing"
)

// Claims is one agent's record of the named leases its sessions hold or
// wait for: it says which requests to send the leader and when, and turns
// the leader's replies into what a session sees (acquired, lost, ...). A
// lease held here is valid until the send time of the request its grant
// answered plus TTL × (1 − drift), on this node's clock; past that it is
// lost, whatever the leader says later. Deterministic over the caller's
// clock; not safe for concurrent use.
type Claims struct {
	self   leasing.Node
	drift  float64
	seq    uint64
	sent   map[uint64]time.Time // send time of each recent request
	claims map[key]*claim
	leader leasing.Node // where requests go; zero when none is known
	term   uint64
}

type key struct {
	name    string
	session uint64
}

// claim is one session's interest in one name.
type claim struct {
	ttl      time.Duration
	wait     bool
	policy   Policy
	held     bool
	token    uint64
	deadline time.Time // of the held lease, on this node's clock
	grantSeq uint64    // the request the latest grant answered
	nextSend time.Time
	position int
	group    string // of a partition
	revoked  bool   // the leader asked for it back (told once)
	// firstSeq is the first request of this claim: an answer to an
	// earlier one (of a claim the session dropped and made again) is
	// not for it.
	firstSeq uint64
}

// EventKind says what happened to a session's claim.
type EventKind uint8

// The events.
const (
	// Acquired: the session holds the name with Token until Deadline.
	Acquired EventKind = iota + 1
	// Renewed: the lease's Deadline moved.
	Renewed
	// Queued: the session waits at Position.
	Queued
	// Lost: the session held the name and no longer does (it ran out, or
	// the leader says another holds it). The claim is gone.
	Lost
	// Refused: the request cannot succeed (busy without waiting, invalid);
	// Code and Message say why. The claim is gone.
	Refused
	// Revoked: the leader asks for the lease back (a partition that must
	// move): the session should stop using it and then Drop it. The lease
	// stays held and renewed meanwhile.
	Revoked
)

var eventNames = map[EventKind]string{Acquired: "acquired", Renewed: "renewed", Queued: "queued", Lost: "lost", Refused: "refused", Revoked: "revoked"}

// String returns the lower-case name of k.
func (k EventKind) String() string {
	if s, ok := eventNames[k]; ok {
		return s
	}
	return "event?"
}

// Event is what happened to one session's claim.
type Event struct {
	Kind     EventKind
	Name     string
	Session  uint64
	Token    uint64
	Deadline time.Time
	Position int
	Code     Code
	Message  string
}

// NewClaims returns the claims of node self, whose clock rate may differ
// from others' by up to drift (a fraction, as leasing.Timing.MaxDrift).
func NewClaims(self leasing.Node, drift float64) *Claims {
	return &Claims{self: self, drift: drift, sent: map[uint64]time.Time{}, claims: map[key]*claim{}}
}

// Want starts a session's claim on name: acquire it (queueing when wait),
// then keep it renewed, with leases of ttl. group names the group of a
// Share name. A claim the session already has is left as it is. A session
// must not claim a name again once it dropped it (use a new session): the
// leader takes an acquire from a holder as a renewal, and the release of
// the old claim could then end the new one's lease behind its back.
func (c *Claims) Want(now time.Time, name string, session uint64, ttl time.Duration, wait bool, policy Policy, group string) {
	k := key{name, session}
	if _, ok := c.claims[k]; ok {
		return
	}
	c.claims[k] = &claim{ttl: ttl, wait: wait, policy: policy, group: group, nextSend: now, firstSeq: c.seq + 1}
}

// Drop ends a session's claim on name and returns the release to send (so
// the next waiter need not wait for the lease to run out), if a leader is
// known.
func (c *Claims) Drop(now time.Time, name string, session uint64) (Request, bool) {
	k := key{name, session}
	cl, ok := c.claims[k]
	if !ok {
		return Request{}, false
	}
	delete(c.claims, k)
	if c.leader.Name == "" {
		return Request{}, false
	}
	return c.request(now, OpRelease, name, session, cl), true
}

// Abandon ends a session's claim on name without releasing a held lease:
// the leader lets it run out, so whatever the session started has its TTL
// to stop before anyone else is granted the name. A claim that waits
// leaves the queue (the release returned, if a leader is known).
func (c *Claims) Abandon(now time.Time, name string, session uint64) (Request, bool) {
	cl, ok := c.claims[key{name, session}]
	if ok && cl.held {
		delete(c.claims, key{name, session})
		return Request{}, false
	}
	return c.Drop(now, name, session)
}

// DropSession ends every claim of session and returns their releases.
func (c *Claims) DropSession(now time.Time, session uint64) []Request {
	var out []Request
	for _, k := range c.keys() {
		if k.session == session {
			if r, ok := c.Drop(now, k.name, k.session); ok {
				out = append(out, r)
			}
		}
	}
	return out
}

// SetLeader records the leader and term requests go to. When they change,
// every claim is sent again at once: a held lease is re-claimed from the
// new leader, a waiter queues there.
func (c *Claims) SetLeader(now time.Time, leader leasing.Node, term uint64) {
	if leader == c.leader && term == c.term {
		return
	}
	c.leader, c.term = leader, term
	for _, cl := range c.claims {
		cl.nextSend = now
		cl.position = 0
	}
}

// Leader returns the leader and term requests go to.
func (c *Claims) Leader() (leasing.Node, uint64) { return c.leader, c.term }

// Due returns the requests to send the leader at now: acquires of claims
// not held (repeated every TTL/3 to keep their place), renewals of held
// leases (every TTL/3 from the last). None while no leader is known.
func (c *Claims) Due(now time.Time) []Request {
	if c.leader.Name == "" {
		return nil
	}
	c.prune(now)
	var out []Request
	for _, k := range c.keys() {
		cl := c.claims[k]
		if now.Before(cl.nextSend) {
			continue
		}
		cl.nextSend = now.Add(cl.ttl / 3)
		op := OpAcquire
		if cl.held {
			op = OpRenew
		}
		out = append(out, c.request(now, op, k.name, k.session, cl))
	}
	return out
}

func (c *Claims) request(now time.Time, op Op, name string, session uint64, cl *claim) Request {
	c.seq++
	c.sent[c.seq] = now
	req := Request{Op: op, Term: c.term, Seq: c.seq, Name: name, Holder: Holder{Node: c.self, Session: session},
		TTL: cl.ttl, Wait: cl.wait, Policy: cl.policy, Group: cl.group}
	if cl.held {
		req.Token = cl.token
	}
	return req
}

// prune forgets send times too old for any grant to count from them.
func (c *Claims) prune(now time.Time) {
	longest := time.Duration(0)
	for _, cl := range c.claims {
		longest = max(longest, cl.ttl)
	}
	for s, at := range c.sent {
		if now.Sub(at) > 2*longest {
			delete(c.sent, s)
		}
	}
}

// Handle takes a reply (or a pushed grant) from the leader, received at
// now. It returns what the sessions see, and the releases to send for
// grants nobody wants any more (the session dropped its claim meanwhile).
func (c *Claims) Handle(now time.Time, rep Reply) ([]Event, []Request) {
	if rep.Holder.Node != c.self {
		return nil, nil
	}
	k := key{rep.Name, rep.Holder.Session}
	cl, ok := c.claims[k]
	if ok && rep.Seq < cl.firstSeq {
		ok = false // an answer to a claim dropped before this one
	}
	if !ok {
		if rep.Code == CodeGranted && rep.Term == c.term && c.leader.Name != "" {
			// A grant for a claim dropped meanwhile: give it back.
			return nil, []Request{c.request(now, OpRelease, rep.Name, rep.Holder.Session, &claim{held: true, token: rep.Token})}
		}
		return nil, nil
	}
	ev := Event{Name: rep.Name, Session: rep.Holder.Session, Code: rep.Code, Message: rep.Message}
	switch rep.Code {
	case CodeGranted:
		sent, known := c.sent[rep.Seq]
		deadline := sent.Add(time.Duration(float64(rep.TTL) * (1 - c.drift)))
		if !known || !now.Before(deadline) || cl.held && rep.Token != cl.token {
			return nil, nil // too late to count; the next renewal decides
		}
		ev.Token = rep.Token
		if !cl.held {
			cl.held, cl.token, cl.deadline, cl.grantSeq = true, rep.Token, deadline, rep.Seq
			cl.nextSend = sent.Add(cl.ttl / 3)
			ev.Kind, ev.Deadline = Acquired, deadline
			return []Event{ev}, nil
		}
		if deadline.After(cl.deadline) {
			cl.deadline, cl.grantSeq = deadline, max(cl.grantSeq, rep.Seq)
		}
		ev.Kind, ev.Deadline = Renewed, cl.deadline
		if rep.Revoke && !cl.revoked {
			cl.revoked = true
			return []Event{ev, {Kind: Revoked, Name: rep.Name, Session: rep.Holder.Session, Token: cl.token, Deadline: cl.deadline}}, nil
		}
		return []Event{ev}, nil
	case CodeQueued:
		if cl.held || rep.Position == cl.position {
			return nil, nil
		}
		cl.position = rep.Position
		ev.Kind, ev.Position = Queued, rep.Position
		return []Event{ev}, nil
	case CodeLost:
		if !cl.held || rep.Seq < cl.grantSeq {
			return nil, nil // an answer older than the latest grant
		}
		delete(c.claims, k)
		ev.Kind, ev.Token = Lost, cl.token
		if rep.Message == "" {
			ev.Message = fmt.Sprintf("the leader says %s holds it", rep.Current)
		}
		return []Event{ev}, nil
	case CodeBusy, CodeInvalid:
		if cl.held {
			return nil, nil
		}
		delete(c.claims, k)
		ev.Kind = Refused
		if rep.Code == CodeBusy && rep.Message == "" {
			ev.Message = fmt.Sprintf("held by %s", rep.Current)
		}
		return []Event{ev}, nil
	case CodeNotLeader:
		cl.nextSend = now.Add(min(cl.ttl/10, 200*time.Millisecond))
	}
	return nil, nil
}

// Expire ends the held leases whose deadline has passed at now.
func (c *Claims) Expire(now time.Time) []Event {
	var out []Event
	for _, k := range c.keys() {
		cl := c.claims[k]
		if cl.held && !now.Before(cl.deadline) {
			delete(c.claims, k)
			out = append(out, Event{Kind: Lost, Name: k.name, Session: k.session, Token: cl.token,
				Message: "its lease ran out before a renewal reached the leader"})
		}
	}
	return out
}

// Valid returns the token and deadline of a session's lease on name, if it
// holds one at now.
func (c *Claims) Valid(now time.Time, name string, session uint64) (uint64, time.Time, bool) {
	cl, ok := c.claims[key{name, session}]
	if !ok || !cl.held || !now.Before(cl.deadline) {
		return 0, time.Time{}, false
	}
	return cl.token, cl.deadline, true
}

// Held is one lease held here.
type Held struct {
	Name     string
	Session  uint64
	Token    uint64
	Deadline time.Time
}

// Holding lists the leases held here at now, by name.
func (c *Claims) Holding(now time.Time) []Held {
	var out []Held
	for _, k := range c.keys() {
		if tok, dl, ok := c.Valid(now, k.name, k.session); ok {
			out = append(out, Held{Name: k.name, Session: k.session, Token: tok, Deadline: dl})
		}
	}
	return out
}

// Next returns the earliest instant a claim needs attention (a send or an
// expiry), or zero when none does.
func (c *Claims) Next() time.Time {
	var t time.Time
	for _, cl := range c.claims {
		for _, at := range []time.Time{cl.nextSend, cl.deadline} {
			if !at.IsZero() && (t.IsZero() || at.Before(t)) {
				t = at
			}
		}
	}
	return t
}

func (c *Claims) keys() []key {
	ks := make([]key, 0, len(c.claims))
	for k := range c.claims {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].name != ks[j].name {
			return ks[i].name < ks[j].name
		}
		return ks[i].session < ks[j].session
	})
	return ks
}

// Waiting lists the names some session here wants but does not hold, with
// the session and its place in the queue (0 when not yet known), by name.
func (c *Claims) Waiting() []Event {
	var out []Event
	for _, k := range c.keys() {
		if cl := c.claims[k]; !cl.held {
			out = append(out, Event{Kind: Queued, Name: k.name, Session: k.session, Position: cl.position})
		}
	}
	return out
}
