//go:build nemesis

package nemesis

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Fault kinds a schedule draws from.
const (
	FaultHalves    = "halves"         // a 2|3 partition
	FaultIsolate   = "isolate-leader" // the leader cut off from all others
	FaultRing      = "ring"           // each node reaches its two ring neighbours
	FaultBridge    = "bridge"         // two halves joined by one node
	FaultOneWay    = "one-way"        // one half's packets dropped by the other
	FaultUDP       = "udp-cut"        // the leader's UDP cut both ways, TCP works
	FaultLoss      = "loss"           // random packet loss between all agents
	FaultDelay     = "delay"          // every packet between agents delayed, and reordered
	FaultSlow      = "slow-leader"    // the leader's packets to and from all others delayed
	FaultKill      = "kill"           // kill -9 of a node, restarted with its data dir
	FaultWipe      = "kill-wipe"      // kill -9 of a node, restarted with an empty data dir
	FaultPause     = "pause"          // SIGSTOP of the leader's agent for 3, 8, 15 or 30 s
	FaultPauseHost = "pause-host"     // SIGSTOP of the leader's agent, tenure run and writer
	FaultRestart   = "restart-all"    // kill -9 of every agent, then all restarted
	FaultJoin      = "join"           // a node with the highest ID joins (once per schedule)
	// FaultReaddress kills a node's agent (the leader's half the time),
	// moves its host to another address (its octet plus 150, and back the
	// next time) and starts the agent again at once with its data dir
	// (emptied when it moves back): a host back with a new DHCP lease, or
	// a container rescheduled, before the others noticed it gone.
	FaultReaddress = "readdress"
	// FaultDiskFull fills a node's disk (the leader's half the time) so
	// that its writes to its data dir fail, and frees it after the hold.
	FaultDiskFull = "disk-full"
	// FaultCrash kills the leader's agent and leaves it down. Not drawn:
	// it serves the scenario that shows the liveness check can fail.
	FaultCrash = "crash-leader"
	// FaultCutSuccessor cuts a transfer's named successor (a resign's
	// natural one) from every node but the leader, under the act: it
	// answers the leader, but cannot reach a majority of the voters. Not
	// drawn: a fixed scenario's.
	FaultCutSuccessor = "cut-successor"
	// FaultCutClaimant, under a drain, cuts the drained node's peer
	// transport from every node but the leader that followed it, CutAfter
	// its drain is lifted (gossip still reaches all): it claims the term
	// back (it outranks that leader), and is cut off from the voters
	// while it claims. Not drawn: a fixed scenario's.
	FaultCutClaimant = "cut-claimant"
	// FaultDiskStepDown, under a stop of a third node, fills the leader's
	// disk, and fills the disk of its natural successor (the running node
	// of highest ID after it) or pauses it (Step.Successor): the stop asks
	// the leader to take the stopping voter out of the roster, the
	// leader's write of that roster step fails, and it steps down, asking
	// its successor first, which cannot take the term. Not drawn: a fixed
	// scenario's.
	FaultDiskStepDown = "disk-step-down"
)

// Operator actions, drawn beside the faults when a plan includes them:
// what the README tells an operator to do to a running cluster. They are
// not faults, but each hands leadership over, and a hand-over is where
// the order of journal, hooks, writer and release matters.
const (
	FaultStop     = "stop"     // SIGTERM of a node's agent (a graceful leave), restarted after the hold
	FaultDrain    = "drain"    // tenure drain on a node, lifted with drain --off after the hold
	FaultTransfer = "transfer" // tenure transfer of the leader's term to another running node
	FaultResign   = "resign"   // tenure resign --hold on the leader, the hold drawn as a fault's
)

// operatorDrawn are the operator actions a plan with them draws from,
// after the faults.
var operatorDrawn = []string{FaultStop, FaultDrain, FaultTransfer, FaultResign}

// drawn are the kinds a step is drawn from, each equally likely; a join
// replaces the draw once per schedule, at a random step.
var drawn = []string{FaultHalves, FaultIsolate, FaultRing, FaultBridge, FaultOneWay, FaultUDP, FaultLoss,
	FaultKill, FaultWipe, FaultPause, FaultPauseHost, FaultRestart}

// diskDrawn are the kinds a plan with disk faults adds to the draw, after
// the operator actions; an operator's action may then be drawn under them
// too.
var diskDrawn = []string{FaultDiskFull}

// delayDrawn are the kinds a plan with delays adds to the draw, after
// the full disks, alone and under operator actions.
var delayDrawn = []string{FaultDelay, FaultSlow}

// readdressDrawn are the kinds a plan with new addresses adds to the
// draw, after the delays (not under operator actions).
var readdressDrawn = []string{FaultReaddress}

// losses are the drop probabilities a loss is drawn with.
var losses = []float64{0.05, 0.15, 0.3}

// delays are the mean delays a delay or a slow leader is drawn with:
// about a LAN's and a WAN's round trips, a fifth of the default lease
// TTL, and three quarters of it.
var delays = []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, 400 * time.Millisecond, 1500 * time.Millisecond}

// PauseLengths are the fixed lengths of a pause of the leader's agent.
var PauseLengths = []time.Duration{3 * time.Second, 8 * time.Second, 15 * time.Second, 30 * time.Second}

// Step is one fault of a schedule.
type Step struct {
	Kind string
	// Hold is how long the fault lasts before it is undone (for kills, how
	// long the node stays down; for a readdress, how long its agent runs at
	// the new address before the heal).
	Hold time.Duration
	// Loss is the drop probability of a loss step.
	Loss float64
	// Delay is the mean delay of a delay or slow-leader step.
	Delay time.Duration
	// Pick seeds the choices made when the step runs: which nodes, on
	// which side. Who leads then is the cluster's doing.
	Pick uint64
	// Under is, for an operator's action, the fault (one of underDrawn)
	// held while the operator acts, for Hold; empty for none. Loss is its
	// drop probability when it is a loss, Delay its delay when it delays.
	Under string
	// OnSuccessor makes the kill or pause of a transfer or a resign hit
	// the successor its RESIGN names (for a transfer the named node, the
	// transfer asked on the leader; for a resign the natural successor,
	// the running node of highest ID after the leader): a fixed
	// scenario's choice (Plan leaves it to the draw when the step runs).
	OnSuccessor bool
	// UnderHold, when not zero, is how long the fault under an operator's
	// action lasts instead of Hold: a fixed scenario's choice, for a
	// resign whose --hold should end before the fault does.
	UnderHold time.Duration
	// CutAfter is, for a drain under FaultCutClaimant, how long after the
	// drain is lifted the cut comes.
	CutAfter time.Duration
	// Successor is, under FaultDiskStepDown, what befalls the leader's
	// natural successor: FaultDiskFull or FaultPause.
	Successor string
}

// underHold is how long the fault under an operator's action lasts.
func (s Step) underHold() time.Duration {
	if s.UnderHold > 0 {
		return s.UnderHold
	}
	return s.Hold
}

// networkDrawn are the network faults an operator's action may be drawn
// under.
var networkDrawn = []string{FaultHalves, FaultIsolate, FaultRing, FaultBridge, FaultOneWay, FaultUDP, FaultLoss}

// underDrawn are the faults an operator's action may be drawn under: the
// network faults, a kill -9 of a node and a pause of a node's agent (and,
// in a plan with disk faults, a full disk). The node killed, paused or
// filled is neither the leader nor the node acted on (the operator's
// command must reach them); for a transfer it is the named successor half
// the time, unless the command is asked on it, and a resign's natural
// successor half the time when its disk is filled. A full disk under a
// stop of another node is the leader's half the time: it cannot store the
// roster step that takes the stopping voter out, and steps down.
var underDrawn = append(slices.Clip(networkDrawn), FaultKill, FaultPause)

func (s Step) String() string {
	if s.Under == "" {
		return s.bare()
	}
	under := s.withSeverity(s.Under)
	if s.Kind == FaultTransfer || s.UnderHold > 0 { // the bare form shows no hold, or another
		under += fmt.Sprintf(" for %v", s.underHold())
	}
	return fmt.Sprintf("%s under %s", s.bare(), under)
}

// bare is the step without the fault it is under.
func (s Step) bare() string {
	switch {
	case s.Kind == FaultJoin || s.Kind == FaultCrash || s.Kind == FaultTransfer:
		return s.Kind
	case s.Kind == FaultResign:
		return fmt.Sprintf("%s --hold %v", s.Kind, s.Hold)
	}
	return fmt.Sprintf("%s for %v", s.withSeverity(s.Kind), s.Hold)
}

// withSeverity is kind, the step's or the one it is under, with its drop
// probability if it is a loss and its delay if it delays.
func (s Step) withSeverity(kind string) string {
	switch kind {
	case FaultLoss:
		return fmt.Sprintf("%s %.0f%%", kind, s.Loss*100)
	case FaultDelay, FaultSlow:
		return fmt.Sprintf("%s %v", kind, s.Delay)
	}
	return kind
}

// drawSeverity draws the drop probability of a loss, or the delay of a
// delay, when kind (the step's or the one it is under) is one.
func (s *Step) drawSeverity(kind string, rng *rand.Rand) {
	switch kind {
	case FaultLoss:
		s.Loss = losses[rng.IntN(len(losses))]
	case FaultDelay, FaultSlow:
		s.Delay = delays[rng.IntN(len(delays))]
	}
}

// Draw says what a plan draws beyond the faults that every plan draws
// from (the network faults but delays, kills, pauses and a restart of
// all). Each kind was added after seeds had been recorded; without it, a
// seed gives the plan it gave before the kind existed.
type Draw struct {
	// Join replaces one step, at random, by a sixth node joining.
	Join bool
	// Ops draws the operator actions too, each as likely as a fault
	// (stops and drains hold 2–10 s, a resign's --hold is 2–10 s), half
	// of them under a network fault, a kill or a pause held as long.
	Ops bool
	// Disk draws full disks (held 2–10 s), alone and under operator
	// actions.
	Disk bool
	// Delay draws delays of every link and of the leader's links
	// (held 2–10 s), alone and under operator actions.
	Delay bool
	// Readdress draws kills after which the node's host comes back at
	// once with another address (held 2–10 s before the heal).
	Readdress bool
	// Only, when not empty, keeps of the kinds the fields above draw
	// only these, as steps and as the faults operator actions run under
	// (an action with none of those left runs bare): a soak aimed at a
	// few faults. A seed gives another plan with it than without.
	Only []string
}

// kinds are the kinds d draws as steps, and the faults it draws operator
// actions under.
func (d Draw) kinds() (kinds, under []string) {
	kinds, under = drawn, underDrawn
	if d.Ops {
		kinds = append(slices.Clip(drawn), operatorDrawn...)
	}
	if d.Disk {
		kinds = append(slices.Clip(kinds), diskDrawn...)
		under = append(slices.Clip(under), diskDrawn...)
	}
	if d.Delay {
		kinds = append(slices.Clip(kinds), delayDrawn...)
		under = append(slices.Clip(under), delayDrawn...)
	}
	if d.Readdress {
		kinds = append(slices.Clip(kinds), readdressDrawn...)
	}
	if len(d.Only) > 0 {
		left := func(k string) bool { return !slices.Contains(d.Only, k) }
		kinds = slices.DeleteFunc(slices.Clone(kinds), left)
		under = slices.DeleteFunc(slices.Clone(under), left)
	}
	return kinds, under
}

// Check reports a kind in Only that d does not draw (unknown, or left
// out by the fields above).
func (d Draw) Check() error {
	all := Draw{Ops: d.Ops, Disk: d.Disk, Delay: d.Delay, Readdress: d.Readdress}
	kinds, _ := all.kinds()
	for _, k := range d.Only {
		if !slices.Contains(kinds, k) {
			return fmt.Errorf("nemesis: %q is not a kind this plan draws (%s)", k, strings.Join(kinds, ", "))
		}
	}
	return nil
}

// Plan draws a schedule of steps from seed: the same seed and draw give
// the same steps (d.Check must pass). Partitions and kills hold 2–10 s,
// pauses their fixed lengths, pauses of a host 3, 8 or 15 s, a restart of
// all 1–5 s.
func Plan(seed uint64, steps int, d Draw) []Step {
	rng := rand.New(rand.NewPCG(seed, 0x6e656d65736973))
	kinds, under := d.kinds()
	joinAt := -1
	if d.Join && steps > 1 {
		joinAt = 1 + rng.IntN(steps-1)
	}
	var plan []Step
	for i := range steps {
		s := Step{Kind: kinds[rng.IntN(len(kinds))], Hold: time.Duration(2000+rng.IntN(8001)) * time.Millisecond, Pick: rng.Uint64()}
		switch s.Kind {
		case FaultPause:
			s.Hold = PauseLengths[rng.IntN(len(PauseLengths))]
		case FaultPauseHost:
			s.Hold = PauseLengths[rng.IntN(3)]
		case FaultRestart:
			s.Hold = time.Duration(1000+rng.IntN(4001)) * time.Millisecond
		case FaultLoss, FaultDelay, FaultSlow:
			s.drawSeverity(s.Kind, rng)
		case FaultStop, FaultDrain, FaultTransfer, FaultResign:
			if rng.IntN(2) == 0 && len(under) > 0 {
				s.Under = under[rng.IntN(len(under))]
				s.drawSeverity(s.Under, rng)
			}
		}
		if i == joinAt {
			s = Step{Kind: FaultJoin, Pick: s.Pick}
		}
		plan = append(plan, s)
	}
	return plan
}

// ScaleHolds returns a copy of plan in which each step holds its fault
// (and the fault under it) f times as long: the same faults, drawn the
// same way from the seed, held longer or shorter. With the LAN
// profile a partition held 2-10 s seldom outlasts the suspicion on both of
// its sides (4-24 s); held three times as long, both sides declare the
// other failed, as in a real partition of a minute.
func ScaleHolds(plan []Step, f float64) []Step {
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * f).Round(time.Millisecond) }
	out := slices.Clone(plan)
	for i := range out {
		out[i].Hold = scale(out[i].Hold)
		out[i].UnderHold = scale(out[i].UnderHold)
	}
	return out
}

// DescribePlan is the plan on one line per step.
func DescribePlan(plan []Step) string {
	var b strings.Builder
	for i, s := range plan {
		fmt.Fprintf(&b, "  %2d. %s\n", i+1, s)
	}
	return b.String()
}
