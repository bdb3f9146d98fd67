//go:build nemesis

package nemesis

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// StepResult is what one step did.
type StepResult struct {
	Step Step
	// What names the nodes and sides the step chose.
	What string
	// Refused is an operator's command the agent refused, with its exit
	// status and output; empty when it did what it was asked.
	Refused string
	// Stable is how long after the heal every running agent agreed on a
	// leader again; Unstable says what was still missing if they did not
	// within the wait.
	Stable   time.Duration
	Unstable string
}

// writerWait bounds the wait for the leader's writer before a step.
const writerWait = 5 * time.Second

// RunStep applies s to the cluster, holds it, undoes it and records the
// heal; it returns what it did. Faults aimed at the leader hit a random
// running node when none is known.
func (c *Cluster) RunStep(s Step) (StepResult, error) {
	r := StepResult{Step: s}
	var err error
	switch s.Kind {
	case FaultStop, FaultDrain, FaultTransfer, FaultResign:
		r.What, r.Refused, err = c.operate(s)
	default:
		r.What, err = c.fault(s)
	}
	return r, err
}

// target is the leader, once its writer writes (or writerWait has
// passed), or a random running node when no leader is known.
func (c *Cluster) target(s Step, rng *rand.Rand) (*Node, error) {
	target := c.Leader()
	if target == nil {
		target = c.randomUp(rng)
	} else if !c.WaitWriting(target, writerWait) {
		c.cfg.Logger.Warn("the leader's writer is not writing; the step goes on", "leader", target.Name)
	}
	if target == nil {
		return nil, fmt.Errorf("nemesis: %s: no agent is running", s.Kind)
	}
	return target, nil
}

// fault runs a fault step.
func (c *Cluster) fault(s Step) (string, error) {
	rng := rand.New(rand.NewPCG(s.Pick, 1))
	target, err := c.target(s, rng)
	if err != nil {
		return "", err
	}
	voters := c.rosterVoters(target)
	p, ok := c.network(s.Kind, s, target, rng)
	if !ok {
		return c.processFault(s, target, rng, voters)
	}
	if err := c.Partition(p); err != nil {
		return "", err
	}
	if err := c.markQuorate(voters); err != nil {
		return "", err
	}
	time.Sleep(s.Hold)
	detail := p.Detail
	if p.Delay > 0 {
		detail += fmt.Sprintf(" (%d packets held)", c.delays.held.Load())
	}
	if err := c.HealNetwork(); err != nil {
		return "", err
	}
	return detail, c.Heal("network whole")
}

// network is the partition of a network fault of kind, s's or the one it
// is under (s.Loss its drop probability, s.Delay its delay; target the
// node an isolation, a UDP cut or a slow link hits); false when kind is
// not a network fault.
func (c *Cluster) network(kind string, s Step, target *Node, rng *rand.Rand) (Partition, bool) {
	all := names(c.nodes)
	switch kind {
	case FaultHalves:
		return Halves(all, rng), true
	case FaultIsolate:
		return Isolate(all, target.Name), true
	case FaultRing:
		return Ring(all, rng), true
	case FaultBridge:
		return Bridge(all, rng), true
	case FaultOneWay:
		return OneWay(all, rng), true
	case FaultUDP:
		return UDPCut(all, target.Name), true
	case FaultLoss:
		return Loss(all, s.Loss), true
	case FaultDelay:
		return Delay(all, s.Delay), true
	case FaultSlow:
		return Slow(all, target.Name, s.Delay), true
	}
	return Partition{}, false
}

// processFault runs the steps that kill, wipe, pause, move or add agents,
// or fill a disk; voters are the roster's before it, for markQuorate. A
// fault that is undone is held for s.Hold, then undone (undo).
func (c *Cluster) processFault(s Step, leader *Node, rng *rand.Rand, voters []string) (string, error) {
	victim := leader // kills hit the leader half the time, another node otherwise
	if rng.IntN(2) == 0 {
		victim = c.randomUp(rng)
	}
	var what string
	var undo func() error                   // nil for a fault that stays (a crash) or is no fault (a join)
	var listed func() (time.Duration, bool) // a readdress's watchListing
	var err error
	switch s.Kind {
	case FaultKill, FaultWipe:
		what, err = victim.Name, c.Kill(victim)
		if err == nil && s.Kind == FaultWipe {
			err = c.Wipe(victim)
		}
		undo = func() error { return c.StartAgents(victim) }
	case FaultReaddress:
		what, err = victim.Name, c.Kill(victim)
		var back bool
		if err == nil {
			back, err = c.Readdress(victim)
		}
		if err == nil && back {
			// Moving back, it comes with an empty data dir too (a
			// container rescheduled with its volume lost): nothing
			// names its previous address, and its vote waits out a TTL.
			what += " wiped"
			err = c.Wipe(victim)
		}
		if err == nil {
			what += " to " + victim.Host.Addr
			err = c.StartAgents(victim)
		}
		if err == nil {
			listed = c.watchListing(victim)
			undo = func() error { return nil } // it runs at its new address for the hold
		}
	case FaultPause:
		what, err = leader.Name, c.Pause(leader)
		undo = func() error { return c.Resume(leader) }
	case FaultPauseHost:
		what, err = leader.Name, c.PauseHost(leader)
		undo = func() error { return c.ResumeHost(leader) }
	case FaultRestart:
		up := slices.DeleteFunc(c.Nodes(), func(n *Node) bool { return n.agent == nil })
		what, err = "all", c.Kill(up...)
		undo = func() error { return c.StartAgents(up...) }
	case FaultCrash:
		what, err = leader.Name, c.Kill(leader)
	case FaultDiskFull:
		what, err = victim.Name, c.FillDisk(victim)
		undo = func() error { return c.FreeDisk(victim) }
	case FaultJoin:
		var n *Node
		if n, err = c.AddNode(); err == nil {
			what = n.Name
		}
	default:
		err = fmt.Errorf("nemesis: unknown fault %q", s.Kind)
	}
	if err == nil && undo != nil {
		if err = c.markQuorate(voters); err == nil {
			time.Sleep(s.Hold)
			err = undo()
		}
	}
	if err != nil {
		return what, err
	}
	if s.Kind == FaultCrash {
		return what, c.Heal(fmt.Sprintf("network whole, every agent running but %s, which stays down", what))
	}
	err = c.Heal("every agent running, network whole")
	if listed != nil {
		switch d, ok := listed(); {
		case ok:
			what += fmt.Sprintf("; listed at its new address by the others after %v", d.Round(time.Millisecond))
		default:
			missed := fmt.Sprintf("not listed at its new address by every other agent within %v", d)
			what += "; " + missed
			if err == nil {
				err = fmt.Errorf("nemesis: %s was %s", victim.Name, missed)
			}
		}
	}
	return what, err
}

// watchListing measures how long after now every other running agent
// lists n alive at its gossip address, polling every 100 ms. The function
// it returns waits for that, up to listingBound after now, and returns
// how long it took, or listingBound and false.
func (c *Cluster) watchListing(n *Node) func() (time.Duration, bool) {
	start := time.Now()
	addr := n.Host.Addr + ":7946"
	others := slices.DeleteFunc(c.Nodes(), func(o *Node) bool { return o == n || !o.Up() })
	stop := make(chan struct{})
	done := make(chan time.Duration, 1)
	go func() { // done when listed, stopped, or after listingBound
		for !c.listedBy(others, n.Name, addr) {
			if time.Since(start) > listingBound {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		done <- time.Since(start)
	}()
	return func() (time.Duration, bool) {
		defer close(stop)
		select {
		case d := <-done:
			return d, true
		case <-time.After(time.Until(start.Add(listingBound))):
			return listingBound, false
		}
	}
}

// listingBound is how long the others may take to list a node at its new
// address (watchListing): a failure detection and a suspicion take 8.4
// and 4 s with three LAN members, 26 and 24 s with nine.
const listingBound = time.Minute

// listedBy reports whether each of nodes lists name alive at addr.
func (c *Cluster) listedBy(nodes []*Node, name, addr string) bool {
	for _, o := range nodes {
		ms, err := o.Members()
		if err != nil {
			return false
		}
		i := slices.IndexFunc(ms, func(m rpc.Member) bool { return m.Name == name })
		if i < 0 || ms[i].Status != rpc.MemberAlive || ms[i].Addr != addr {
			return false
		}
	}
	return true
}

// operate runs an operator's step on the leader (a stop or a drain: on
// another running node half the time), under its fault if it has one,
// and records the heal once all is undone: the network whole, the killed
// or paused node running again, the stopped agent restarted, the drain
// lifted.
func (c *Cluster) operate(s Step) (what, refused string, err error) {
	rng := rand.New(rand.NewPCG(s.Pick, 1))
	leader, node, to, what, err := c.operands(s, rng)
	if err != nil {
		return "", "", err
	}
	voters := c.rosterVoters(leader)
	under, undo, err := c.underFault(s, rng, leader, node, to)
	if under != "" {
		what += "; " + under
	}
	if err != nil {
		return what, "", err
	}
	if refused, err = c.act(s, node, to); err != nil {
		return what, refused, err
	}
	if err := c.markQuorate(voters); err != nil {
		return what, refused, err
	}
	switch {
	case s.Under == FaultCutClaimant:
		time.Sleep(s.Hold) // the drain's; the cut comes after it
	case s.Under != "" || s.Kind == FaultStop || s.Kind == FaultDrain:
		time.Sleep(s.underHold())
	}
	if err := undo(); err != nil {
		return what, refused, err
	}
	lifted, err := c.undoAct(s, node)
	refused = strings.TrimSpace(refused + " " + lifted)
	if err != nil {
		return what, refused, err
	}
	if s.Under == FaultCutClaimant {
		cut, err := c.cutClaimant(s, node)
		what += "; " + cut
		if err != nil {
			return what, refused, err
		}
	}
	return what, refused, c.Heal("every agent running and undrained, network whole")
}

// cutClaimant cuts the peer transport of claimant, whose drain was just
// lifted, from every node but the leader, s.CutAfter later, for
// s.UnderHold (FaultCutClaimant). Gossip still reaches every node, so
// the leader sees the claimant alive and its claims stand.
func (c *Cluster) cutClaimant(s Step, claimant *Node) (string, error) {
	time.Sleep(s.CutAfter)
	leader := c.Leader()
	if leader == nil || leader == claimant {
		return "", fmt.Errorf("nemesis: cut-claimant: %s's drain lifted %v ago, and the leader is %v, not another node", claimant.Name, s.CutAfter, leader)
	}
	p := PeerCutBut(names(c.nodes), claimant.Name, leader.Name)
	if err := c.Partition(p); err != nil {
		return "", err
	}
	time.Sleep(s.underHold())
	return p.Detail + fmt.Sprintf(" (%v after the drain was lifted)", s.CutAfter), c.HealNetwork()
}

// operands draws whom an operator's action of step s involves: the
// leader, the node it is asked on, and a transfer's target (nil when no
// node but the leader runs), and says so.
func (c *Cluster) operands(s Step, rng *rand.Rand) (leader, node, to *Node, what string, err error) {
	if leader, err = c.target(s, rng); err != nil {
		return nil, nil, nil, "", err
	}
	node = leader
	if rng.IntN(2) == 0 {
		node = c.randomUp(rng)
	}
	if s.Kind == FaultResign || s.OnSuccessor || s.Under == FaultCutClaimant { // asked of the leader whatever the draw
		node = leader
	}
	if s.Under == FaultDiskStepDown { // neither the leader nor its successor
		node = c.randomUp(rng, leader, c.highestUp(leader))
		if node == nil {
			return nil, nil, nil, "", errors.New("nemesis: disk-step-down: no third running node to stop")
		}
	}
	what = node.Name
	if node == leader {
		what += " (leader)"
	}
	to = c.randomUp(rng, leader)
	if s.Kind == FaultTransfer {
		if to == nil {
			return nil, nil, nil, "", errors.New("nemesis: transfer: no running node but the leader")
		}
		what = fmt.Sprintf("%s to %s (asked on %s)", leader.Name, to.Name, node.Name)
	}
	return leader, node, to, what, nil
}

// underFault puts on the fault (s.Under) the action runs under: a
// network partition or loss, or a kill, pause or full disk of another
// node; it says what it did and returns what undoes it.
func (c *Cluster) underFault(s Step, rng *rand.Rand, leader, node, to *Node) (string, func() error, error) {
	none := func() error { return nil }
	if s.Under == FaultCutClaimant {
		return "", none, nil // after the act (cutClaimant)
	}
	if s.Under == FaultDiskStepDown {
		return c.diskStepDown(s, leader)
	}
	p, ok := c.network(s.Under, s, leader, rng)
	if s.Under == FaultCutSuccessor {
		successor := to // a transfer's; a resign names the next highest
		if s.Kind != FaultTransfer {
			successor = c.highestUp(leader)
		}
		if successor == nil {
			return "", none, errors.New("nemesis: cut-successor: no running node but the leader")
		}
		p, ok = CutBut(names(c.nodes), successor.Name, leader.Name), true
	}
	if ok {
		if err := c.Partition(p); err != nil {
			return "", none, err
		}
		return p.Detail, c.HealNetwork, nil
	}
	if s.Under == "" {
		return "", none, nil
	}
	but := []*Node{leader, node}
	if s.Kind == FaultTransfer {
		but = append(but, to)
	}
	victim := c.randomUp(rng, but...)
	if s.Kind == FaultTransfer && to != node && (rng.IntN(2) == 0 || s.OnSuccessor) {
		victim = to // the named successor, unless it is asked
	}
	if s.Kind == FaultResign && (s.OnSuccessor || s.Under == FaultDiskFull && rng.IntN(2) == 0) {
		victim = c.highestUp(leader) // the successor its RESIGN names
	}
	if s.Kind == FaultStop && s.Under == FaultDiskFull && node != leader && rng.IntN(2) == 0 {
		// The leader's: it cannot store the roster step that takes the
		// stopping voter out, and steps down (a disk step-down).
		victim = leader
	}
	under, undo, err := c.underProcess(s.Under, victim)
	if err != nil {
		return "", none, err
	}
	return under, undo, nil
}

// diskStepDown fills the disk of leader and fills the disk of its
// natural successor or pauses it (FaultDiskStepDown, s.Successor), says
// so, and returns what undoes both.
func (c *Cluster) diskStepDown(s Step, leader *Node) (string, func() error, error) {
	none := func() error { return nil }
	successor := c.highestUp(leader)
	if successor == nil {
		return "", none, errors.New("nemesis: disk-step-down: no running node but the leader")
	}
	if err := c.FillDisk(leader); err != nil {
		return "", none, err
	}
	under, undo, err := c.underProcess(s.Successor, successor)
	if err != nil {
		return "", none, errors.Join(err, c.FreeDisk(leader))
	}
	return fmt.Sprintf("filled the disk of %s (leader), %s (its successor)", leader.Name, under),
		func() error { return errors.Join(c.FreeDisk(leader), undo()) }, nil
}

// act carries out the operator's action of step s on node; refused is
// what the agent refused, if anything.
func (c *Cluster) act(s Step, node, to *Node) (refused string, err error) {
	switch s.Kind {
	case FaultStop:
		return "", c.StopAgents(node)
	case FaultDrain:
		return c.Operate(node, "drain")
	case FaultTransfer:
		return c.Operate(node, "transfer", to.Name)
	case FaultResign:
		return c.Operate(node, "resign", "--hold", s.Hold.String())
	}
	return "", nil
}

// undoAct undoes what act did, where it lasts: it starts a stopped node
// again and lifts a drain.
func (c *Cluster) undoAct(s Step, node *Node) (refused string, err error) {
	switch s.Kind {
	case FaultStop:
		return "", c.StartAgents(node)
	case FaultDrain:
		return c.Operate(node, "drain", "--off")
	}
	return "", nil
}

// underProcess kills, pauses or fills the disk of victim (kind FaultKill,
// FaultPause or FaultDiskFull) under an operator's action, says so, and
// returns what undoes it (restarting or resuming victim, freeing its
// disk); with no victim (no other node runs) it
// does nothing and says that.
func (c *Cluster) underProcess(kind string, victim *Node) (string, func() error, error) {
	none := func() error { return nil }
	if victim == nil {
		return "no other running node to " + kind, none, nil
	}
	switch kind {
	case FaultKill:
		return "killed " + victim.Name, func() error { return c.StartAgents(victim) }, c.Kill(victim)
	case FaultPause:
		return "paused " + victim.Name, func() error { return c.Resume(victim) }, c.Pause(victim)
	case FaultDiskFull:
		return "filled the disk of " + victim.Name, func() error { return c.FreeDisk(victim) }, c.FillDisk(victim)
	}
	return "", none, fmt.Errorf("nemesis: no operator's action is drawn under %q", kind)
}

// highestUp is the running, unpaused node of highest ID other than but,
// or nil: a resign's natural successor when every node may lead and none
// holds.
func (c *Cluster) highestUp(but *Node) *Node {
	var best *Node
	for _, n := range c.nodes {
		if n.Up() && n != but && (best == nil || n.ID > best.ID) {
			best = n
		}
	}
	return best
}

// randomUp is a random running, unpaused node other than those of but,
// or nil.
func (c *Cluster) randomUp(rng *rand.Rand, but ...*Node) *Node {
	var up []*Node
	for _, n := range c.nodes {
		if n.Up() && !slices.Contains(but, n) {
			up = append(up, n)
		}
	}
	if len(up) == 0 {
		return nil
	}
	return up[rng.IntN(len(up))]
}
