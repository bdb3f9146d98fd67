package agent

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/tenurehq/tenure/gossip"
	"github.com/tenurehq/tenure/leasing"
	"github.com/tenurehq/tenure/rpc"
)

// subscriberBuffer is how many events a watcher may fall behind before it is
// dropped; a slow watcher never slows the agent.
const subscriberBuffer = 256

// broadcaster fans events out to watchers. publish never blocks.
type broadcaster struct {
	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	closed bool
}

type subscriber struct {
	ch      chan rpc.Event
	observe func(rpc.Event) // nil, or called with every event queued for it
	once    sync.Once
}

func (s *subscriber) end() { s.once.Do(func() { close(s.ch) }) }

func newBroadcaster() *broadcaster {
	return &broadcaster{subs: map[*subscriber]struct{}{}}
}

// subscribe registers a watcher whose first event is made by initial, called
// under the broadcaster's lock so that no event published meanwhile is lost,
// then every published event. cancel is idempotent.
func (b *broadcaster) subscribe(initial func() rpc.Event) (<-chan rpc.Event, func()) {
	return b.subscribeWith(initial, nil)
}

// subscribeWith is subscribe, with observe (unless nil) called with every
// event queued for the watcher, the first one included, under the
// broadcaster's lock and before publish returns: so the driver knows, once
// it has published, what each runner has been told.
func (b *broadcaster) subscribeWith(initial func() rpc.Event, observe func(rpc.Event)) (<-chan rpc.Event, func()) {
	s := &subscriber{ch: make(chan rpc.Event, subscriberBuffer+1), observe: observe}
	b.mu.Lock()
	defer b.mu.Unlock()
	s.queue(initial())
	if b.closed {
		s.end()
		return s.ch, func() {}
	}
	b.subs[s] = struct{}{}
	return s.ch, func() { b.remove(s) }
}

func (b *broadcaster) remove(s *subscriber) {
	b.mu.Lock()
	delete(b.subs, s)
	b.mu.Unlock()
	s.end()
}

// publish sends ev to every watcher; one whose buffer is full is dropped
// (its channel closed) rather than waited for.
func (b *broadcaster) publish(ev rpc.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		if !s.queue(ev) {
			delete(b.subs, s)
			s.end()
		}
	}
}

// queue hands ev to the watcher without blocking; false when its buffer is
// full.
func (s *subscriber) queue(ev rpc.Event) bool {
	select {
	case s.ch <- ev:
	default:
		return false
	}
	if s.observe != nil {
		s.observe(ev)
	}
	return true
}

func (b *broadcaster) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for s := range b.subs {
		delete(b.subs, s)
		s.end()
	}
}

// publishMember turns a gossip event into a watch event.
func (a *Agent) publishMember(ev gossip.Event) {
	name := map[gossip.EventType]string{
		gossip.EventJoin:   rpc.EventMemberJoin,
		gossip.EventLeave:  rpc.EventMemberLeave,
		gossip.EventFailed: rpc.EventMemberFailed,
		gossip.EventUpdate: rpc.EventMemberUpdate,
	}[ev.Type]
	if name == "" {
		return
	}
	level := slog.LevelInfo
	if ev.Type == gossip.EventUpdate {
		level = slog.LevelDebug // tag changes: a fleet that learns a roster updates every member
	}
	a.log.Log(context.Background(), level, "membership", "event", name, "member", ev.Member.Name, "addr", ev.Member.Addr)
	st := a.Status()
	m := a.rpcMember(ev.Member, st.Leader)
	a.publish(rpc.Event{
		Time:   formatTime(time.Now()),
		Event:  name,
		Leader: st.Leader,
		Node:   ev.Member.Name,
		Member: &m,
	})
}

func (a *Agent) rpcMember(m gossip.Member, leader *rpc.LeaderInfo) rpc.Member {
	r := a.rosters.Roster()
	return rpc.Member{
		Role:          memberRole(r, m),
		Zone:          m.Tags[zoneTag],
		Name:          m.Name,
		ID:            m.ID,
		Addr:          m.Addr,
		PeerAddr:      m.PeerAddr,
		Status:        m.Status.String(),
		Voter:         m.Voter,
		Eligible:      m.Eligible,
		IsLeader:      leader != nil && leader.Node == m.Name && leader.ID == m.ID,
		Drained:       m.Tags[drainedTag] == "1",
		StorageFailed: m.Tags[storageTag] == "1",
	}
}

// memberRole is m's place in roster r (see rpc.Member.Role).
func memberRole(r leasing.Roster, m gossip.Member) string {
	n := leasing.Node{ID: m.ID, Name: m.Name}
	inNew, inOld := slices.Contains(r.Voters, n), slices.Contains(r.Prev, n)
	switch {
	case inNew && r.Joint() && !inOld:
		return rpc.RoleStaging
	case inNew:
		return rpc.RoleVoter
	case inOld:
		return rpc.RoleLeaving
	case m.Status == gossip.StatusLeft:
		return rpc.RoleLeft
	default:
		return rpc.RoleObserver
	}
}
