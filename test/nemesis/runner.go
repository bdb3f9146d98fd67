//go:build nemesis

package nemesis

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// StepResult is what one step did.
type StepResult struct {
	Step Step
	// What names the nodes and sides the step chose.
	What string
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
func (c *Cluster) RunStep(s Step) (string, error) {
	rng := rand.New(rand.NewPCG(s.Pick, 1))
	all := names(c.nodes)
	target := c.Leader()
	if target == nil {
		target = c.randomUp(rng)
	} else if !c.WaitWriting(target, writerWait) {
		c.cfg.Logger.Warn("the leader's writer is not writing; the step goes on", "leader", target.Name)
	}
	if target == nil {
		return "", fmt.Errorf("nemesis: %s: no agent is running", s.Kind)
	}
	var p Partition
	switch s.Kind {
	case FaultHalves:
		p = Halves(all, rng)
	case FaultIsolate:
		p = Isolate(all, target.Name)
	case FaultRing:
		p = Ring(all, rng)
	case FaultBridge:
		p = Bridge(all, rng)
	case FaultOneWay:
		p = OneWay(all, rng)
	case FaultUDP:
		p = UDPCut(all, target.Name)
	case FaultLoss:
		p = Loss(all, s.Loss)
	default:
		return c.processFault(s, target, rng)
	}
	if err := c.Partition(p); err != nil {
		return "", err
	}
	time.Sleep(s.Hold)
	if err := c.HealNetwork(); err != nil {
		return "", err
	}
	return p.Detail, c.Heal("network whole")
}

// processFault runs the steps that kill, wipe, pause or add agents.
func (c *Cluster) processFault(s Step, leader *Node, rng *rand.Rand) (string, error) {
	victim := leader // kills hit the leader half the time, another node otherwise
	if rng.IntN(2) == 0 {
		victim = c.randomUp(rng)
	}
	var what string
	var err error
	switch s.Kind {
	case FaultKill, FaultWipe:
		what, err = victim.Name, c.Kill(victim)
		if err == nil && s.Kind == FaultWipe {
			err = c.Wipe(victim)
		}
		if err == nil {
			time.Sleep(s.Hold)
			err = c.StartAgents(victim)
		}
	case FaultPause:
		what, err = leader.Name, c.Pause(leader)
		if err == nil {
			time.Sleep(s.Hold)
			err = c.Resume(leader)
		}
	case FaultPauseHost:
		what, err = leader.Name, c.PauseHost(leader)
		if err == nil {
			time.Sleep(s.Hold)
			err = c.ResumeHost(leader)
		}
	case FaultRestart:
		up := slices.DeleteFunc(c.Nodes(), func(n *Node) bool { return n.agent == nil })
		what, err = "all", c.Kill(up...)
		if err == nil {
			time.Sleep(s.Hold)
			err = c.StartAgents(up...)
		}
	case FaultCrash:
		what, err = leader.Name, c.Kill(leader)
	case FaultJoin:
		var n *Node
		if n, err = c.AddNode(); err == nil {
			what = n.Name
		}
	default:
		err = fmt.Errorf("nemesis: unknown fault %q", s.Kind)
	}
	if err != nil {
		return what, err
	}
	if s.Kind == FaultCrash {
		return what, c.Heal(fmt.Sprintf("network whole, every agent running but %s, which stays down", what))
	}
	return what, c.Heal("every agent running, network whole")
}

// randomUp is a random running, unpaused node, or nil.
func (c *Cluster) randomUp(rng *rand.Rand) *Node {
	var up []*Node
	for _, n := range c.nodes {
		if n.Up() {
			up = append(up, n)
		}
	}
	if len(up) == 0 {
		return nil
	}
	return up[rng.IntN(len(up))]
}
