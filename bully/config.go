package bully

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Config holds a Machine's identity and timing. The durations relate to the
// gossip layer's failure detection and to the peer round-trip time; the
// defaults suit a LAN.
type Config struct {
	// Self is this node.
	Self Member
	// Epoch is the highest epoch persisted by an earlier run (0 when fresh).
	Epoch uint64
	// Preempt makes a leader yield to a higher eligible node that has been
	// live for Stabilization. Without it a stable leader keeps leading.
	Preempt bool
	// ConfirmPreempt makes a leader about to yield to a higher node (with
	// Preempt) ask its driver first (Ready.Preempt) and yield only once the
	// driver answers that the node can take the term (PreemptAnswered):
	// the node's claims say it reached a majority of the voters when it
	// last probed them, which may be an announce interval old. Without it
	// the leader yields at once.
	ConfirmPreempt bool
	// StartupDelay is how long a fresh Machine waits before its first
	// campaign, so gossip can converge and a sitting leader can announce
	// itself. Default 2s.
	StartupDelay time.Duration
	// ElectionTimeout is the least time a candidate waits for an ANSWER
	// after sending ELECTION before it considers itself the highest; when
	// the driver measured longer peer round trips (SetRoundTrip) it waits
	// for those, up to CoordinatorTimeout. Default 500ms.
	ElectionTimeout time.Duration
	// CoordinatorTimeout is how long a candidate that got an ANSWER waits for
	// the COORDINATOR before it starts over. Default 2s.
	CoordinatorTimeout time.Duration
	// RankDelay is the wait per higher-ranked eligible live node before a
	// node campaigns for a vacant leadership, so the highest goes first.
	// Default 300ms.
	RankDelay time.Duration
	// Jitter is the upper bound of a random extra wait added to every
	// campaign timer. Default 100ms.
	Jitter time.Duration
	// Stabilization is how long a higher node must be live before a leader
	// yields to it (with Preempt). Default 5s.
	Stabilization time.Duration
	// ResignHold is how long a node that resigned stays out of elections.
	// Default 10s.
	ResignHold time.Duration
	// TransferWindow is how long, after a leader handed its term to a named
	// successor (a RESIGN with Successor), the other nodes leave the election
	// to the successor: they neither campaign nor start an election of
	// their own, and the successor retries a refused lease round after
	// half an election timeout rather than after the refusing promises.
	// It should cover the successor's lease round and its COORDINATOR; a
	// successor that has not taken over by then is left behind and the
	// normal election proceeds, as it does at once when gossip stops
	// listing the successor alive and eligible (SetMembers). Zero means
	// CoordinatorTimeout.
	TransferWindow time.Duration
	// AnnounceInterval is how often a leader repeats its COORDINATOR to every
	// live member, so a node that missed the announcement (a lost message, a
	// healed partition) learns the current term. A follower keeps a leader
	// that gossip does not list alive until an announce interval and an
	// election wait after its last COORDINATOR (at least
	// CoordinatorTimeout). Default 3s.
	AnnounceInterval time.Duration
	// MinDetection is the least time the membership takes to report failed
	// a member that stopped answering: with gossip, one probe timeout and
	// the shortest suspicion (gossip.Timing.FailureDetectionFloor). A
	// follower whose leader's COORDINATOR arrived less than MinDetection
	// before gossip reported the leader failed takes the report for a
	// wrong one (it is refuted within milliseconds) and keeps the leader
	// until its next COORDINATOR is due; a leader that really stopped was
	// silent longer and is forgotten at once. Zero, the default, believes
	// every report at once.
	MinDetection time.Duration
	// RetryDelay bounds the random wait after a failed lease round before the
	// next campaign. Default 1s.
	RetryDelay time.Duration
	// MaxEpochJump bounds how far above the highest epoch this node has seen
	// a peer's message may name an epoch or term: a message beyond it is
	// dropped and reported (Ready.RefusedEpoch), never adopted. Legitimate
	// epochs grow by one per lease attempt, so a jump of this size cannot
	// come from a working cluster; a forged one would otherwise be persisted
	// and could exhaust the epochs. The bound holds for a fresh node too
	// (its highest epoch is 0): a cluster's epochs never get near it.
	// Default DefaultMaxEpochJump.
	MaxEpochJump uint64
	// ElectionFanout is how many higher nodes one round of a campaign asks:
	// the highest-ranked eligible live ones (neither holding nor silent).
	// When none of them answers within ElectionTimeout they are marked
	// silent and the next ones are asked; the node wins once no higher node
	// is left. Asking every higher node at once cost a campaign O(n)
	// messages, and a wave of campaigns (each asked node without a leader
	// campaigns in turn) O(n²). 0 means DefaultElectionFanout.
	ElectionFanout int
	// Rand is the only source of randomness. Nil means a generator seeded
	// from Self, which is deterministic; drivers should pass a random seed.
	Rand *rand.Rand
}

// DefaultMaxEpochJump is the default Config.MaxEpochJump: about a million
// lease attempts.
const DefaultMaxEpochJump = 1 << 20

// EpochJump is MaxEpochJump, or DefaultMaxEpochJump when it is zero.
func (c Config) EpochJump() uint64 {
	if c.MaxEpochJump == 0 {
		return DefaultMaxEpochJump
	}
	return c.MaxEpochJump
}

// transferWindow is TransferWindow, or CoordinatorTimeout when it is zero.
func (c Config) transferWindow() time.Duration {
	if c.TransferWindow == 0 {
		return c.CoordinatorTimeout
	}
	return c.TransferWindow
}

// DefaultElectionFanout is the default Config.ElectionFanout.
const DefaultElectionFanout = 3

// Fanout is ElectionFanout, or DefaultElectionFanout when it is zero.
func (c Config) Fanout() int {
	if c.ElectionFanout <= 0 {
		return DefaultElectionFanout
	}
	return c.ElectionFanout
}

// DefaultConfig returns the LAN timing defaults with Preempt on.
func DefaultConfig() Config {
	return Config{
		Preempt:            true,
		StartupDelay:       2 * time.Second,
		ElectionTimeout:    500 * time.Millisecond,
		CoordinatorTimeout: 2 * time.Second,
		RankDelay:          300 * time.Millisecond,
		Jitter:             100 * time.Millisecond,
		Stabilization:      5 * time.Second,
		ResignHold:         10 * time.Second,
		AnnounceInterval:   3 * time.Second,
		RetryDelay:         time.Second,
		MaxEpochJump:       DefaultMaxEpochJump,
		ElectionFanout:     DefaultElectionFanout,
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if c.Self.Name == "" {
		return errors.New("bully: config: Self.Name is empty")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		zero bool // zero allowed
	}{
		{"StartupDelay", c.StartupDelay, true},
		{"ElectionTimeout", c.ElectionTimeout, false},
		{"CoordinatorTimeout", c.CoordinatorTimeout, false},
		{"RankDelay", c.RankDelay, true},
		{"Jitter", c.Jitter, true},
		{"Stabilization", c.Stabilization, true},
		{"ResignHold", c.ResignHold, true},
		{"TransferWindow", c.TransferWindow, true},
		{"AnnounceInterval", c.AnnounceInterval, false},
		{"RetryDelay", c.RetryDelay, true},
		{"MinDetection", c.MinDetection, true},
	} {
		if d.v < 0 || (d.v == 0 && !d.zero) {
			return fmt.Errorf("bully: config: %s must be positive, got %v", d.name, d.v)
		}
	}
	if c.ElectionFanout < 0 {
		return fmt.Errorf("bully: config: ElectionFanout must not be negative, got %d", c.ElectionFanout)
	}
	if c.CoordinatorTimeout < c.ElectionTimeout {
		return fmt.Errorf("bully: config: CoordinatorTimeout (%v) must be at least ElectionTimeout (%v)",
			c.CoordinatorTimeout, c.ElectionTimeout)
	}
	return nil
}
