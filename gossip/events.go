package gossip

import (
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/serf/serf"
)

// greetFanout is how many members, on average, greet a failed member that
// came back (see noteReturns).
const greetFanout = 3

// greetTurn draws whether this member greets, so that greetFanout of a
// cluster of n members do on average. Spreading load needs no
// reproducible randomness.
func greetTurn(n int) bool {
	return rand.Float64() < greetFanout/float64(max(1, n-1))
}

// pump moves serf's events into the unbounded queue behind Events, one
// member per event, until Shutdown or until serf stops by itself. It never
// blocks serf: while it waits for the reader it still accepts serf's events.
//
// Between events it calls serf (Members, NumNodes), which takes serf's
// member lock, and serf sends member events while holding that lock. That
// cannot deadlock: serf sends them into its own relay's channel (1024
// deep, and the snapshotter's 2048 before it), whose goroutine forwards
// them to in, so a send under the lock waits on the pump only when more
// than a thousand events are pending; a change that makes the pump wait
// on anything longer than a lock should keep this in mind.
func (m *Membership) pump(in <-chan serf.Event) {
	defer m.wg.Done()
	defer close(m.events)
	var queue []Event
	failed := m.heal.failed // members last reported failed, kept by noteReturns
	check := time.NewTicker(m.leaves.quick / 2)
	defer check.Stop()
	for {
		var out chan<- Event
		var next Event
		if len(queue) > 0 {
			out, next = m.events, queue[0]
		}
		select {
		case e := <-in:
			evs := m.split(e)
			m.noteReturns(evs, failed)
			if m.heal.note(evs, time.Now()) {
				m.publishWatch()
			}
			queue = append(queue, evs...)
		case name := <-m.heal.suspects:
			m.noteSuspect(name, time.Now())
		case name := <-m.net.heard:
			m.noteHeard(name, time.Now())
		case <-check.C:
			now := time.Now()
			queue = append(queue, m.checkLeaving(now)...)
			if m.heal.expire(now, m.serf.NumNodes()) {
				m.publishWatch()
			}
		case out <- next:
			queue[0] = Event{}
			queue = queue[1:]
		case <-m.ctx.Done():
			return
		case <-m.serf.ShutdownCh():
			if m.ctx.Err() == nil {
				m.logger.Error("gossip: serf stopped by itself (lost a node-name conflict?); membership is dead")
			}
			return
		}
	}
}

// checkLeaving looks, at now, for members serf holds leaving while
// memberlist lists them alive (leaveWatch), and returns an EventUpdate,
// with the member alive, for each revived by this look.
func (m *Membership) checkLeaving(now time.Time) []Event {
	var leaving []serf.Member
	for _, s := range m.serf.Members() {
		if s.Status == serf.StatusLeaving && s.Name != m.cfg.Name { // this node's own leave is its own
			leaving = append(leaving, s)
		}
	}
	alive := map[string]bool{}
	if len(leaving) > 0 {
		// memberlist lists the members it holds alive or suspect, not
		// those dead or left (and keeps no state in the Node it returns).
		for _, n := range m.serf.Memberlist().Members() {
			alive[n.Name] = true
		}
	}
	watched := make([]leavingMember, len(leaving))
	for i, s := range leaving {
		watched[i] = leavingMember{name: s.Name, staying: s.Tags[tagLeaving] == "0"}
	}
	revived := m.leaves.observe(now, watched, func(name string) bool { return alive[name] })
	var evs []Event
	for i, s := range leaving {
		if !slices.Contains(revived, s.Name) {
			continue
		}
		level, msg, bound := slog.LevelWarn, "gossip: serf still holds a member leaving that memberlist sees alive; counting it alive (hashicorp/serf#662)", m.leaves.bound
		if watched[i].staying {
			level, msg, bound = slog.LevelInfo, "gossip: serf holds a member leaving whose own tags say it is not; counting it alive (hashicorp/serf#662)", m.leaves.quick
		}
		m.logger.Log(m.ctx, level, msg,
			"member", s.Name, "addr", net.JoinHostPort(s.Addr.String(), strconv.Itoa(int(s.Port))), "leaving_at_least", bound)
		ev := Event{Type: EventUpdate, Member: m.convert(s)}
		ev.Member.Status = StatusAlive
		evs = append(evs, ev)
	}
	return evs
}

// split turns one serf member event into one Event per member. Other serf
// events (user events, queries) are not used by tenure and are dropped.
func (m *Membership) split(e serf.Event) []Event {
	me, ok := e.(serf.MemberEvent)
	if !ok {
		m.logger.Debug("gossip: ignoring serf event", "type", e.EventType().String())
		return nil
	}
	t, ok := convertEventType(me.Type)
	if !ok {
		return nil
	}
	out := make([]Event, 0, len(me.Members))
	for _, sm := range me.Members {
		out = append(out, Event{Type: t, Member: m.convert(sm)})
	}
	return out
}

func convertEventType(t serf.EventType) (EventType, bool) {
	switch t {
	case serf.EventMemberJoin:
		return EventJoin, true
	case serf.EventMemberLeave:
		return EventLeave, true
	case serf.EventMemberFailed:
		return EventFailed, true
	case serf.EventMemberUpdate:
		return EventUpdate, true
	case serf.EventMemberReap:
		return EventReap, true
	}
	return 0, false
}

// noteReturns tracks which members failed and greets those that come back.
// A failed member that restarts on the same address without a join list or
// snapshot is seen alive by the others at once (it refutes their failure
// probes), but would learn of them only when one happens to pick it for a
// push-pull sync, PushPullInterval or more later. Greeting it with a full
// state exchange tells it about everyone now. Each member greets with
// probability greetFanout/n, so a large cluster does not flood it.
func (m *Membership) noteReturns(evs []Event, failed map[string]bool) {
	for _, e := range evs {
		name := e.Member.Name
		switch e.Type {
		case EventFailed:
			failed[name] = true
		case EventLeave, EventReap:
			delete(failed, name)
		case EventJoin:
			if failed[name] {
				delete(failed, name)
				if greetTurn(m.serf.NumNodes()) {
					m.greet(name, e.Member.Addr)
				}
			}
		}
	}
}

// greet runs a state exchange with the member at addr in the background.
func (m *Membership) greet(name, addr string) {
	if !m.track() {
		return
	}
	go func() {
		defer m.wg.Done()
		if _, err := m.serf.Memberlist().Join([]string{name + "/" + addr}); err != nil {
			m.logger.Debug("gossip: greeting a returning member failed", "member", name, "err", err)
		}
	}()
}
