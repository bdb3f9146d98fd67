package gossip

import (
	"sync"
	"time"
)

// leaveWatch finds members that serf holds "leaving" long after any real
// leave would have ended, while memberlist sees them alive, and counts
// them alive again (hashicorp/serf#662, open). Serf moves a member to
// leaving on a leave intent, without an event, and back to alive only on
// a join intent with a later Lamport time. A push-pull makes up a leave
// for every member the other side lists as left, one past the other
// side's time for it, so while a member is away its leave's time climbs
// with every exchange between members that list it left; the join the
// member announces on its return, stamped from the clocks of the members
// it joined through, can be below it. A member that still lists it left
// then hands a node that has already taken the return a leave above the
// join, and memberlist there, which saw the member alive, reports no
// join, so nothing clears the state until the member fails or leaves
// again. Seen in the fault harness
// (docs/RELIABILITY.md, "A live member seen as leaving"): a node resumed
// after a pause held the restarted leader as leaving for 16 s, and
// dropped it as leader every second.
//
// A real leave ends within its own bound (leaveBound): the member
// broadcasts the intent, then memberlist's leave, waits, and stops, and
// others then see it left, or suspect it when they probe it. A member
// still leaving past the bound while memberlist lists it alive is
// revived: Members reports it alive and the pump queues an EventUpdate
// for it, so that readers rebuild their view. It stays revived until
// serf's status for it changes.
//
// The member's own tags say sooner which case it is. Leave first
// advertises the reserved tag "l" as "1" (this run is leaving) and waits
// for that update to go out, and only then broadcasts serf's leave; every
// other update of the run says "0". Memberlist carries the tags with the
// member's alive messages, and lists a returned member alive only with
// the tags of its new run. So a member serf holds leaving whose tags say
// "0" while memberlist lists it alive is in the stuck state, or its mark
// is still on the way (it spreads like the leave, and set out first):
// it is revived after quickLeaveBound. One whose tags say "1", or carry
// no mark (an agent from before the mark), waits out leaveBound.
type leaveWatch struct {
	bound time.Duration // for a member marked leaving, or not marked
	quick time.Duration // for a member whose tags say its run is not leaving

	mu      sync.Mutex
	since   map[string]time.Time // first seen leaving while memberlist saw it alive
	revived map[string]bool
}

func newLeaveWatch(t Timing) *leaveWatch {
	return &leaveWatch{bound: leaveBound(t), quick: quickLeaveBound(t), since: map[string]time.Time{}, revived: map[string]bool{}}
}

// leaveBound is how long a member can be seen leaving while memberlist
// still lists it alive in a real leave: serf waits up to BroadcastTimeout
// for its leave intent to go out and memberlist as long for its own
// leave, then LeavePropagateDelay before it stops; a member that stopped
// without its leave arriving is suspected within a probe or two. Not
// covered: memberlist lists a suspect member until the suspicion runs
// out (up to 24 s with the LAN profile), so a node that read serf's
// leave intent of a member but not memberlist's leave, and did not probe
// it early, can count that member alive from the bound until then.
func leaveBound(t Timing) time.Duration {
	return 2*t.BroadcastTimeout + t.LeavePropagateDelay + 2*t.ProbeInterval
}

// quickLeaveBound is how long a member whose tags say its run is not
// leaving can be seen leaving before it counts alive: how long the mark
// of a real leave can trail the leave itself. The mark went out before
// the leave, and both spread by gossip, each from node to node, so at a
// node the leave comes first only by a faster path: within the time serf
// gives a leave to spread (LeavePropagateDelay) and two gossip rounds.
// A node that lost every copy of the mark and then reads the leave counts
// the member alive until memberlist's leave of it arrives (or, lost too,
// its suspicion runs out), as it would a member that failed.
func quickLeaveBound(t Timing) time.Duration {
	return t.LeavePropagateDelay + 2*t.GossipInterval
}

// leavingMember is a member serf holds leaving, as the watch sees it.
type leavingMember struct {
	name string
	// staying is set when the member's tags say its run is not leaving
	// (the mark is "0").
	staying bool
}

// observe records, at now, the members serf holds leaving (leaving) and
// whether memberlist lists each alive (alive), and returns those revived
// by this call. Members no longer leaving are forgotten.
func (w *leaveWatch) observe(now time.Time, leaving []leavingMember, alive func(name string) bool) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	still := make(map[string]bool, len(leaving))
	var out []string
	for _, lm := range leaving {
		name := lm.name
		still[name] = true
		if w.revived[name] {
			continue
		}
		if !alive(name) {
			delete(w.since, name) // memberlist suspects it too: a real leave, or a failure
			continue
		}
		first, ok := w.since[name]
		if !ok {
			first = now
			w.since[name] = now
		}
		bound := w.bound
		if lm.staying {
			bound = w.quick
		}
		if now.Sub(first) >= bound {
			w.revived[name] = true
			out = append(out, name)
		}
	}
	for name := range w.since {
		if !still[name] {
			delete(w.since, name)
		}
	}
	for name := range w.revived {
		if !still[name] {
			delete(w.revived, name)
		}
	}
	return out
}

// isRevived reports whether name, which serf holds leaving, counts alive.
func (w *leaveWatch) isRevived(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.revived[name]
}
