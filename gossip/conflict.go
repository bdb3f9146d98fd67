package gossip

import (
	"context"
	"errors"
	"math"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// conflictGate holds this node's tag updates while serf resolves a
// conflict over its name.
//
// When another node claims this node's name from another address, serf
// starts a goroutine that asks the cluster which address the name
// belongs to and compares the answers with the address of
// memberlist.LocalNode, a pointer into memberlist's state that it reads
// without a lock. Every SetTags rewrites that address (with the same
// value) under memberlist's lock, so a tag update during the resolution is
// a data race inside serf. Serf says when a resolution starts and ends
// only in its log, so the gate reads those lines as they are written:
//   - "Node name conflicts with another node ... (Resolution enabled:
//     true)" is written under memberlist's lock, just before the resolver
//     starts: the gate shuts;
//   - "majority/minority in name conflict resolution" and "Failed to start
//     name resolution query" are written after the resolver's last read:
//     the gate opens when every resolution started has ended.
//
// SetTags waits while the gate is shut. For an update already past that
// check, memberlist asks the gate (as its AliveDelegate, under the same
// lock as the start line) and the gate refuses this node's own alive
// message while shut, so nothing is written; SetTags then sees that a
// resolution started during its update and makes it again once the gate
// opens. If an end line never comes (a serf whose messages changed), the
// gate opens anyway after bound.
type conflictGate struct {
	name   string
	bound  time.Duration // how long one resolution may hold the gate
	timing Timing
	began  time.Time // when this node's gossip started

	mu       sync.Mutex
	running  int           // resolutions started and not yet ended
	deadline time.Time     // when the gate opens even so
	open     chan struct{} // closed when the gate opens; nil while open

	started atomic.Int64 // resolutions started since the gate was made

	// self is the address this node advertises, set before serf starts.
	self netip.AddrPort
	// claims are the other addresses news of this node's name came from,
	// and what a ping there found (readdress.go); pings takes those to
	// ping. Under mu.
	claims map[netip.AddrPort]claim
	pings  chan netip.AddrPort
}

// claim is what a ping found at an address from which news of this
// node's name came (conflictGate.claimAt), and until when it stands.
type claim struct {
	found claimFound
	until time.Time // for claimSilent
	// silentSince is when a ping there first found nothing, zero if none
	// has; kept while it is pinged again.
	silentSince time.Time
}

// claimFound is what a ping found.
type claimFound int

const (
	claimPinging  claimFound = iota + 1 // not yet known: its news is refused meanwhile
	claimSilent                         // no answer: an earlier run of this node
	claimAnswered                       // a live node answers there under this node's name
	// no answer, but its news still came when an earlier run of this
	// node there would have been declared failed by all: another node
	// with this node's name, which this node cannot reach
	claimUnreachable
)

// claimRecheck is how long at most a silent address's news is refused
// unpinged: news of it still coming after that is pinged again. A dead
// host's news stops once the others have declared it failed; a live node
// with this node's name that a partition kept from answering is found
// once the partition heals, or once its news outlasts an earlier run's
// (conflictGate.settle).
const claimRecheck = 30 * time.Second

// maxClaims bounds the addresses the gate remembers: beyond it, news from
// a new address goes to serf's resolution unpinged, as before the gate
// pinged any.
const maxClaims = 64

// errNameConflict is the reason memberlist is given for ignoring this
// node's own alive message while a name conflict is being resolved.
var errNameConflict = errors.New("tags held while a conflict over this node's name is resolved")

// newConflictGate returns an open gate for the node called name, whose
// gossip starts now with timing t. Serf's resolution lasts one query
// timeout (gossip interval × 16 × log10 of the cluster size, rounded up);
// the gate waits twice that for the largest cluster allowed, and at least
// 30 s.
func newConflictGate(name string, t Timing, maxMembers int) *conflictGate {
	query := t.GossipInterval * 16 * time.Duration(math.Ceil(math.Log10(float64(maxMembers+1))))
	return &conflictGate{name: name, bound: max(2*query, 30*time.Second), timing: t, began: time.Now(),
		claims: map[netip.AddrPort]claim{}, pings: make(chan netip.AddrPort, 8)}
}

// observe reads one of serf's log messages (its component and message,
// without the level) for the start or end of a resolution.
func (g *conflictGate) observe(component, msg string) {
	if component != "serf" {
		return
	}
	switch {
	case strings.HasPrefix(msg, "Node name conflicts with another node") &&
		strings.HasSuffix(msg, "(Resolution enabled: true)"):
		g.begin(time.Now())
	case strings.HasPrefix(msg, "majority in name conflict resolution"),
		strings.HasPrefix(msg, "minority in name conflict resolution"),
		strings.HasPrefix(msg, "Failed to start name resolution query"):
		g.end()
	}
}

func (g *conflictGate) begin(now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expire(now)
	if g.running == 0 {
		g.open = make(chan struct{})
	}
	g.running++
	g.deadline = now.Add(g.bound)
	g.started.Add(1)
}

func (g *conflictGate) end() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running > 0 {
		g.running--
		if g.running == 0 {
			g.reopen()
		}
	}
}

// expire opens the gate if its deadline has passed. g.mu is held.
func (g *conflictGate) expire(now time.Time) {
	if g.running > 0 && !now.Before(g.deadline) {
		g.reopen()
	}
}

// reopen opens a shut gate and wakes its waiters. g.mu is held.
func (g *conflictGate) reopen() {
	g.running = 0
	close(g.open)
	g.open = nil
}

// shut reports whether the gate is shut, and if so a channel closed when
// it opens and the time it opens at the latest.
func (g *conflictGate) shut() (bool, <-chan struct{}, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expire(time.Now())
	return g.running > 0, g.open, g.deadline
}

// wait returns when the gate is open, or ctx's error when ctx ends first.
func (g *conflictGate) wait(ctx context.Context) error {
	for {
		shut, open, deadline := g.shut()
		if !shut {
			return nil
		}
		timer := time.NewTimer(time.Until(deadline))
		select {
		case <-open:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
		timer.Stop()
	}
}

// NotifyAlive implements memberlist.AliveDelegate: while the gate is shut
// it refuses alive messages for this node's name, so memberlist does not
// rewrite the local node's address (see conflictGate). News of this node
// at another address waits for a ping there, and is refused if nothing
// answers (claimAt): after a restart on a new address, the others list
// the old one until they declare it failed, and taken as another node's
// claim to the name it would start a conflict resolution that this node,
// the minority until then, loses, and serf would stop (a restart on a new
// address stopped itself 3-4 s after it started).
func (g *conflictGate) NotifyAlive(n *memberlist.Node) error {
	if n.Name != g.name {
		return nil
	}
	if ip, ok := netip.AddrFromSlice(n.Addr); ok {
		at := netip.AddrPortFrom(ip.Unmap(), n.Port)
		if g.self.IsValid() && at != g.self {
			if err := g.claimAt(at); err != nil {
				return err
			}
		}
	}
	if shut, _, _ := g.shut(); shut {
		return errNameConflict
	}
	return nil
}

// claimAt decides on news of this node's name from another address at,
// for NotifyAlive. The first such news is refused, and at is pinged under
// this node's name (Membership.checkClaims): where nothing answers, at is
// taken for an earlier run of this node (restarted on another address,
// whether or not the address file names it: a wiped data dir has none),
// and its news is refused as the previous run's until it is due to be
// pinged again (settle), if it still comes; where a node answers, it is
// another node given the same name (at the address this node had before,
// too), and its news goes to serf's resolution, one of the two stopping.
// So does news from an address where nothing answers that still comes
// when an earlier run there would have been declared failed by all
// (claimUnreachable).
func (g *conflictGate) claimAt(at netip.AddrPort) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, known := g.claims[at]
	switch {
	case c.found == claimAnswered, c.found == claimUnreachable:
		return nil
	case c.found == claimSilent && time.Now().Before(c.until):
		return errPreviousRun
	case c.found == claimPinging:
		return errClaimPinging
	case !known && len(g.claims) >= maxClaims:
		return nil
	}
	select {
	case g.pings <- at:
		g.claims[at] = claim{found: claimPinging, silentSince: c.silentSince}
	default: // pings are queued: a later news of it asks again
	}
	return errClaimPinging
}

// settle records what the ping at at found at now, in a cluster of n
// members: answered, or not. Where nothing answered, it stands until the
// news of an earlier run of this node there has surely ended (the
// others declared that run failed: Timing.earlierRunGone after this
// node's start, for it stopped before), and for at least the least time
// in which a member declares an address failed; at most claimRecheck.
// News from there after that is pinged again, and where nothing answers
// then either, the news came from another node with this node's name
// that this node cannot reach (a partition between exactly the two), and
// it goes to serf's resolution: settle reports that it found that. Until
// then such twins each took the other's address for their own earlier
// run, and both kept running.
func (g *conflictGate) settle(now time.Time, at netip.AddrPort, answered bool, n int) (unreachable bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if answered {
		g.claims[at] = claim{found: claimAnswered}
		return false
	}
	since := g.claims[at].silentSince
	gone := g.began.Add(g.timing.earlierRunGone(n)).Sub(now) // from now
	if !since.IsZero() && gone <= 0 {
		g.claims[at] = claim{found: claimUnreachable, silentSince: since}
		return true
	}
	if since.IsZero() {
		since = now
	}
	until := now.Add(min(claimRecheck, max(gone, g.timing.FailureDetectionFloor())))
	g.claims[at] = claim{found: claimSilent, until: until, silentSince: since}
	return false
}

// errClaimPinging is the reason memberlist is given for ignoring news of
// this node from another address while a ping there is pending.
var errClaimPinging = errors.New("news of this node's name from another address, not yet pinged")
