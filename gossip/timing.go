package gossip

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"
)

// Timing holds the gossip knobs that decide how fast failures are detected,
// how fast news spreads and how long the dead are remembered. The first group
// configures memberlist (failure detection and dissemination), the second
// serf (reconnect, reaping, leave). Every field must be set; start from
// LANTiming or LocalTiming and change what you need.
type Timing struct {
	// ProbeInterval is the time between two failure-detection probes; each
	// probe targets the next member in a shuffled round-robin order.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a direct probe waits for an ack before asking
	// other members to probe indirectly. Must be below ProbeInterval and at
	// least the network's 99th-percentile round trip.
	ProbeTimeout time.Duration
	// IndirectChecks is how many members are asked to probe indirectly.
	IndirectChecks int
	// SuspicionMult scales how long a suspect member has to refute before it
	// is declared failed: SuspicionMult × max(1, log10(n)) × ProbeInterval.
	SuspicionMult int
	// SuspicionMaxTimeoutMult bounds the suspicion time, as a multiple of the
	// above, when too few other members confirm the suspicion.
	SuspicionMaxTimeoutMult int
	// GossipInterval is the time between gossip rounds.
	GossipInterval time.Duration
	// GossipNodes is how many random members each gossip round reaches.
	GossipNodes int
	// GossipToTheDeadTime is how long gossip still reaches a failed member,
	// giving it a chance to refute.
	GossipToTheDeadTime time.Duration
	// DeadNodeReclaimTime is how long after a member was declared failed
	// its name may come back from another address (a host that restarted
	// with a new address, a rescheduled container): the new address then
	// replaces the old. Zero, memberlist's default, refuses the new address
	// while the failed member is remembered (GossipToTheDeadTime) as a
	// conflict, and the member stays unlisted until its next full state
	// sync after that: 46 s with the LAN timing, measured.
	DeadNodeReclaimTime time.Duration
	// RetransmitMult scales how many times a broadcast is retransmitted:
	// RetransmitMult × ceil(log10(n+1)).
	RetransmitMult int
	// PushPullInterval is the time between full state syncs over TCP with a
	// random member.
	PushPullInterval time.Duration
	// TCPTimeout bounds stream connections (joins, push-pull, TCP probes).
	TCPTimeout time.Duration

	// ReconnectInterval is how often serf tries to reconnect to a failed
	// member; this is what heals partitions.
	ReconnectInterval time.Duration
	// ReconnectTimeout is how long a failed member is kept, and reconnected
	// to, before it is reaped.
	ReconnectTimeout time.Duration
	// ReapInterval is how often serf reaps failed and left members whose
	// timeouts expired.
	ReapInterval time.Duration
	// TombstoneTimeout is how long a member that left is remembered.
	TombstoneTimeout time.Duration
	// BroadcastTimeout bounds how long Leave waits for its leave message to be
	// sent.
	BroadcastTimeout time.Duration
	// LeavePropagateDelay is how long Leave then stays up so the leave spreads
	// and late probes are answered.
	LeavePropagateDelay time.Duration
}

// LANTiming returns serf's and memberlist's LAN defaults
// (serf.DefaultConfig, memberlist.DefaultLANConfig) but for two:
// DeadNodeReclaimTime is a millisecond, not zero (see the field), and
// ReconnectInterval is 5 s, not serf's 30 s. Once the two sides of a
// partition have declared each other failed and GossipToTheDeadTime has
// passed, they send each other nothing, and serf's reconnect is the only
// thing that joins them again after the heal: with 30 s the sides of a
// healed split stayed apart for up to 30 s (24 s in-process; the fault
// harness saw a 57 s partition heal only at a reconnect,
// docs/RELIABILITY.md). Serf has each member try one failed member per
// interval with probability failed/alive, so the fleet makes about one
// connection attempt per failed member per interval: one every 5 s to a
// dead host costs nothing worth saving. Measured on 3 loopback nodes
// (TestMeasureTiming): a member stopped without leaving is reported failed
// after about 5.8–6.8 s (FailureDetectionBound(3) = 8.4 s); one that
// restarts on the same address within GossipToTheDeadTime is seen alive
// everywhere after about 0.5 s, later than that within about
// ReconnectInterval.
func LANTiming() Timing {
	return Timing{
		ProbeInterval:           time.Second,            // a probe every second
		ProbeTimeout:            500 * time.Millisecond, // reasonable LAN round trip
		IndirectChecks:          3,                      // 3 members probe indirectly
		SuspicionMult:           4,                      // suspect for 4 × log10(n) × probe interval
		SuspicionMaxTimeoutMult: 6,                      // at most 6× that without confirmations
		GossipInterval:          200 * time.Millisecond, // gossip rapidly
		GossipNodes:             3,                      // to 3 members per round
		GossipToTheDeadTime:     30 * time.Second,       // same as push-pull
		DeadNodeReclaimTime:     time.Millisecond,       // a failed member's name may move at once
		RetransmitMult:          4,                      // retransmit 4 × log10(n+1) times
		PushPullInterval:        30 * time.Second,       // full sync is expensive: rarely
		TCPTimeout:              10 * time.Second,       // stream connections
		ReconnectInterval:       5 * time.Second,        // try a failed member every 5 s (serf: 30 s)
		ReconnectTimeout:        24 * time.Hour,         // for a day
		ReapInterval:            15 * time.Second,       // reap expired members every 15 s
		TombstoneTimeout:        24 * time.Hour,         // remember left members for a day
		BroadcastTimeout:        5 * time.Second,        // wait for a leave to go out
		LeavePropagateDelay:     time.Second,            // then let it spread
	}
}

// LocalTiming returns a fast profile for loopback tests and the local demo.
// Measured on 3 loopback nodes (TestMeasureTiming): a member stopped without
// leaving is reported failed after about 0.95–1.2 s (FailureDetectionBound(3)
// = 2.1 s); one that restarts on the same address, or the two halves of a
// healed partition, see each other alive again after about 0.1–1.5 s
// (serf's reconnect, every ReconnectInterval). Failed members are not
// gossiped to (GossipToTheDeadTime 0): reconnecting with a full state
// exchange tells a restarted member about everyone at once. Too aggressive
// for real networks: a member that stalls for a second is declared failed.
func LocalTiming() Timing {
	return Timing{
		ProbeInterval:           200 * time.Millisecond, // 5 probes a second
		ProbeTimeout:            100 * time.Millisecond, // loopback answers in microseconds
		IndirectChecks:          2,                      // enough for 3-5 nodes
		SuspicionMult:           3,                      // suspect for 600 ms (n ≤ 10)
		SuspicionMaxTimeoutMult: 2,                      // at most 1.2 s without confirmation
		GossipInterval:          50 * time.Millisecond,  // gossip rapidly
		GossipNodes:             3,                      // to 3 members per round
		GossipToTheDeadTime:     0,                      // none: reconnect instead (see above)
		DeadNodeReclaimTime:     time.Millisecond,       // a failed member's name may move at once
		RetransmitMult:          3,                      // retransmit 3 × log10(n+1) times
		PushPullInterval:        2 * time.Second,        // full sync often: small clusters
		TCPTimeout:              time.Second,            // stream connections
		ReconnectInterval:       500 * time.Millisecond, // heal within about a second
		ReconnectTimeout:        time.Hour,              // keep reconnecting for the demo
		ReapInterval:            time.Second,            // reap expired members every second
		TombstoneTimeout:        time.Minute,            // remember left members a minute
		BroadcastTimeout:        2 * time.Second,        // wait for a leave to go out
		LeavePropagateDelay:     300 * time.Millisecond, // then let it spread
	}
}

// Validate checks that every field is set and that the relations memberlist
// and serf rely on hold.
func (t Timing) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("gossip: timing: "+format, args...))
		}
	}
	check(t.ProbeInterval > 0, "probe interval must be positive")
	check(t.ProbeTimeout > 0 && t.ProbeTimeout < t.ProbeInterval,
		"probe timeout %v must be positive and below the probe interval %v", t.ProbeTimeout, t.ProbeInterval)
	check(t.IndirectChecks >= 0, "indirect checks must not be negative")
	check(t.SuspicionMult >= 1, "suspicion multiplier must be at least 1")
	check(t.SuspicionMaxTimeoutMult >= 1, "suspicion max timeout multiplier must be at least 1")
	check(t.GossipInterval > 0, "gossip interval must be positive")
	check(t.GossipNodes >= 1, "gossip nodes must be at least 1")
	check(t.GossipToTheDeadTime >= 0, "gossip-to-the-dead time must not be negative")
	check(t.DeadNodeReclaimTime >= 0, "dead node reclaim time must not be negative")
	check(t.RetransmitMult >= 1, "retransmit multiplier must be at least 1")
	check(t.PushPullInterval > 0, "push-pull interval must be positive")
	check(t.TCPTimeout > 0, "TCP timeout must be positive")
	check(t.ReconnectInterval > 0, "reconnect interval must be positive")
	check(t.ReconnectTimeout >= t.ReconnectInterval,
		"reconnect timeout %v must be at least the reconnect interval %v", t.ReconnectTimeout, t.ReconnectInterval)
	check(t.ReapInterval > 0, "reap interval must be positive")
	check(t.TombstoneTimeout > 0, "tombstone timeout must be positive")
	check(t.BroadcastTimeout > 0, "broadcast timeout must be positive")
	check(t.LeavePropagateDelay >= 0, "leave propagate delay must not be negative")
	return errors.Join(errs...)
}

// SuspicionTimeout returns how long a suspect member of a cluster of n
// members has to refute before it is declared failed, when enough other
// members confirm the suspicion (min), and at most (max). It follows
// memberlist's formula: min = SuspicionMult × max(1, log10(n)) ×
// ProbeInterval; max = SuspicionMaxTimeoutMult × min, or min when the cluster
// is too small for memberlist to wait for confirmations.
func (t Timing) SuspicionTimeout(n int) (lo, hi time.Duration) {
	scale := math.Max(1, math.Log10(math.Max(1, float64(n))))
	lo = time.Duration(t.SuspicionMult) * time.Duration(scale*1000) * t.ProbeInterval / 1000
	confirmations := t.SuspicionMult - 2
	if n-2 < confirmations || confirmations < 1 {
		return lo, lo
	}
	return lo, time.Duration(t.SuspicionMaxTimeoutMult) * lo
}

// FailureDetectionFloor is the least time between a member's last answer
// to a probe and any member reporting it failed: a probe timeout (its
// prober waits that long for the ack before it suspects the member) and
// the shortest suspicion memberlist allows, whatever the cluster's size
// and the confirmations (SuspicionTimeout(1)). A member's failure reported
// sooner after a message from it was reported wrongly, or the message was
// delayed in transit.
func (t Timing) FailureDetectionFloor() time.Duration {
	lo, _ := t.SuspicionTimeout(1)
	return t.ProbeTimeout + lo
}

// FailureDetectionBound estimates the longest time, in a cluster of n
// members without packet loss or overloaded nodes, between a member stopping
// and the others reporting it failed: waiting to be probed (at worst two
// probe rounds of n-1 members each), one probe, the longest suspicion, and two
// gossip intervals to spread the news. It is an estimate to size other
// timeouts by, not a guarantee: memberlist slows its probes down when this
// node itself seems unhealthy.
func (t Timing) FailureDetectionBound(n int) time.Duration {
	if n < 2 {
		n = 2
	}
	_, suspicion := t.SuspicionTimeout(n)
	waitProbe := time.Duration(2*(n-1)) * t.ProbeInterval
	return waitProbe + suspicion + 2*t.GossipInterval
}

// earlierRunGone is how long after a node stopped the others of a
// cluster of n members have surely declared it failed, and stopped
// passing on news of it alive: FailureDetectionBound, and a longest
// suspicion more. An estimate, as FailureDetectionBound is. It bounds how
// long a node restarted on a new address announces it (announceNewAddress),
// and when news of its name from its old address, where nothing answers,
// is taken for another node's (conflictGate.settle).
func (t Timing) earlierRunGone(n int) time.Duration {
	_, hi := t.SuspicionTimeout(n)
	return t.FailureDetectionBound(n) + hi
}

// apply copies t into a serf configuration and its memberlist configuration.
func (t Timing) apply(sc *serf.Config, mc *memberlist.Config) {
	mc.ProbeInterval = t.ProbeInterval
	mc.ProbeTimeout = t.ProbeTimeout
	mc.IndirectChecks = t.IndirectChecks
	mc.SuspicionMult = t.SuspicionMult
	mc.SuspicionMaxTimeoutMult = t.SuspicionMaxTimeoutMult
	mc.GossipInterval = t.GossipInterval
	mc.GossipNodes = t.GossipNodes
	mc.GossipToTheDeadTime = t.GossipToTheDeadTime
	mc.DeadNodeReclaimTime = t.DeadNodeReclaimTime
	mc.RetransmitMult = t.RetransmitMult
	mc.PushPullInterval = t.PushPullInterval
	mc.TCPTimeout = t.TCPTimeout
	sc.ReconnectInterval = t.ReconnectInterval
	sc.ReconnectTimeout = t.ReconnectTimeout
	sc.ReapInterval = t.ReapInterval
	sc.TombstoneTimeout = t.TombstoneTimeout
	sc.BroadcastTimeout = t.BroadcastTimeout
	sc.LeavePropagateDelay = t.LeavePropagateDelay
}
