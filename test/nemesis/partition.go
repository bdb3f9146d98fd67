//go:build nemesis

package nemesis

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/tenurehq/tenure/test/nemesis/check"
)

// Rule is one iptables rule on a node's INPUT chain: packets from From
// are dropped (only UDP ones if UDP, only TCP ones to port TCPPort if it
// is set; each with probability Prob if it is above 0), or, if Delay, held
// for the partition's delay and then let through (delayer).
type Rule struct {
	On, From string
	UDP      bool
	TCPPort  int
	Prob     float64
	Delay    bool
}

// peerPort is the port of every agent's peer transport (--peer-bind).
const peerPort = 7947

// Partition is a network fault between the agents' hosts, as the rules
// that make it. The store's host is never cut off or delayed.
type Partition struct {
	Kind   string // halves, isolate, ring, bridge, one-way, udp, loss, delay, slow
	Detail string // who is cut from whom, for the events and the report
	Rules  []Rule
	// Delay is, for the rules with Delay, how long a packet is held on
	// average (each between half and one and a half times it).
	Delay time.Duration
}

// cutBoth drops every packet between each node of a and each of b.
func cutBoth(a, b []string) []Rule { return bothWays(a, b, Rule{}) }

// bothWays applies rule r (its On and From set here) to the packets
// between each node of a and each of b, both ways.
func bothWays(a, b []string, r Rule) []Rule {
	var d []Rule
	for _, x := range a {
		for _, y := range b {
			to, from := r, r
			to.On, to.From = y, x
			from.On, from.From = x, y
			d = append(d, from, to)
		}
	}
	return d
}

// everyPair applies rule r (its On and From set here) to the packets
// between any two of nodes.
func everyPair(nodes []string, r Rule) []Rule {
	var d []Rule
	for _, x := range nodes {
		for _, y := range without(nodes, x) {
			r.On, r.From = x, y
			d = append(d, r)
		}
	}
	return d
}

// Halves cuts the nodes, shuffled, into a minority and a majority.
func Halves(nodes []string, rng *rand.Rand) Partition {
	s := shuffled(nodes, rng)
	a, b := s[:len(s)/2], s[len(s)/2:]
	return Partition{Kind: "halves", Detail: side(a) + " | " + side(b), Rules: cutBoth(a, b)}
}

// Isolate cuts one node from all others.
func Isolate(nodes []string, node string) Partition {
	rest := without(nodes, node)
	return Partition{Kind: "isolate", Detail: node + " | " + side(rest), Rules: cutBoth([]string{node}, rest)}
}

// Ring puts the nodes, shuffled, on a ring where each reaches only its
// two neighbours: with five nodes each sees a majority (itself and two),
// and no two see the same one.
func Ring(nodes []string, rng *rand.Rand) Partition {
	s := shuffled(nodes, rng)
	var d []Rule
	for i, x := range s {
		for j, y := range s {
			if dist := (j - i + len(s)) % len(s); dist > 1 && dist < len(s)-1 {
				d = append(d, Rule{On: x, From: y})
			}
		}
	}
	return Partition{Kind: "ring", Detail: "ring " + strings.Join(s, "-") + "-" + s[0], Rules: d}
}

// Bridge cuts the nodes but one, shuffled, into two halves that cannot
// reach each other; the one left reaches both.
func Bridge(nodes []string, rng *rand.Rand) Partition {
	s := shuffled(nodes, rng)
	b, rest := s[0], s[1:]
	a, c := rest[:len(rest)/2], rest[len(rest)/2:]
	return Partition{Kind: "bridge", Detail: fmt.Sprintf("%s | %s | %s, %s bridging", side(a), b, side(c), b),
		Rules: cutBoth(a, c)}
}

// OneWay drops, on the hosts of one half, every packet from the other:
// traffic flows from the second half to the first only. (A TCP connection
// needs both ways, so in practice it cuts TCP both ways and UDP one way.)
func OneWay(nodes []string, rng *rand.Rand) Partition {
	s := shuffled(nodes, rng)
	from, to := s[:len(s)/2], s[len(s)/2:]
	if rng.IntN(2) == 0 {
		from, to = to, from
	}
	var d []Rule
	for _, x := range to {
		for _, y := range from {
			d = append(d, Rule{On: x, From: y})
		}
	}
	return Partition{Kind: "one-way", Detail: side(from) + " -/-> " + side(to), Rules: d}
}

// UDPCut drops the UDP packets between one node and all others, both
// ways: gossip's probes fail while TCP (the peer port, memberlist's TCP
// fallback probes and push-pull) works.
func UDPCut(nodes []string, node string) Partition {
	rest := without(nodes, node)
	return Partition{Kind: "udp", Detail: node + " | " + side(rest) + ", UDP only",
		Rules: bothWays([]string{node}, rest, Rule{UDP: true})}
}

// CutBut cuts node from every other node but keep, which still reaches
// it both ways.
func CutBut(nodes []string, node, keep string) Partition {
	rest := without(without(nodes, node), keep)
	return Partition{Kind: "cut-but", Detail: fmt.Sprintf("%s | %s, %s reaching both", node, side(rest), keep),
		Rules: cutBoth([]string{node}, rest)}
}

// PeerCutBut cuts node's peer transport (TCP to the peer port, both
// ways) from every node but keep, while gossip still reaches all: node
// stays alive to every member, and answers keep, but reaches no other
// voter's peer port.
func PeerCutBut(nodes []string, node, keep string) Partition {
	rest := without(without(nodes, node), keep)
	return Partition{Kind: "peer-cut-but", Detail: fmt.Sprintf("%s | %s (peer port), %s reaching both", node, side(rest), keep),
		Rules: bothWays([]string{node}, rest, Rule{TCPPort: peerPort})}
}

// Loss drops each packet between any two nodes with probability p.
func Loss(nodes []string, p float64) Partition {
	return Partition{Kind: "loss", Detail: fmt.Sprintf("%.0f%% of packets between agents dropped", p*100),
		Rules: everyPair(nodes, Rule{Prob: p})}
}

// Delay holds every packet between any two nodes for about d (each
// between d/2 and 3d/2, so packets also overtake each other).
func Delay(nodes []string, d time.Duration) Partition {
	return Partition{Kind: "delay", Detail: fmt.Sprintf("packets between agents delayed by %v ±%v", d, d/2),
		Rules: everyPair(nodes, Rule{Delay: true}), Delay: d}
}

// Slow holds every packet to and from node for about d, as Delay does: a
// slow host or a congested link, which nothing reports failed.
func Slow(nodes []string, node string, d time.Duration) Partition {
	return Partition{Kind: "slow", Detail: fmt.Sprintf("%s's packets to and from all others delayed by %v ±%v", node, d, d/2),
		Rules: bothWays([]string{node}, without(nodes, node), Rule{Delay: true}), Delay: d}
}

// Partition records p and applies it: each node's INPUT chain is replaced
// by p's rules for it (nodes p does not name get an empty chain).
func (c *Cluster) Partition(p Partition) error {
	if _, err := c.events.Record(check.EventPartition, nil, p.Kind+": "+p.Detail); err != nil {
		return err
	}
	if p.Delay > 0 {
		if err := c.delays.bind(c.hosts()...); err != nil {
			return err
		}
	}
	c.delays.set(p.Delay)
	c.partition = p
	return c.setRules(p.Rules)
}

// HealNetwork empties every node's INPUT chain. The packets a delay
// holds arrive at once: the network is whole after a heal, with nothing
// older in flight.
func (c *Cluster) HealNetwork() error {
	held, lost := c.delays.set(0)
	c.partition = Partition{}
	err := c.setRules(nil)
	if held > 0 {
		lost += c.delays.lost.Swap(0)
		c.cfg.Logger.Info("the delay fault is over", "packets_held", held, "dropped_by_the_kernel", lost)
	}
	return err
}

// setRules replaces every node's INPUT chain by rules' for it, letting
// through first what a delay holds.
func (c *Cluster) setRules(rules []Rule) error {
	c.delays.release()
	for _, n := range c.nodes {
		var b strings.Builder
		b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n-F INPUT\n")
		for _, r := range rules {
			if r.On != n.Name {
				continue
			}
			from := c.Node(r.From)
			if from == nil {
				return fmt.Errorf("nemesis: partition names unknown node %q", r.From)
			}
			fmt.Fprintf(&b, "-A INPUT -s %s/32", from.Host.Addr)
			switch {
			case r.UDP:
				b.WriteString(" -p udp")
			case r.TCPPort != 0:
				fmt.Fprintf(&b, " -p tcp --dport %d", r.TCPPort)
			}
			if r.Prob > 0 {
				fmt.Fprintf(&b, " -m statistic --mode random --probability %.3f", r.Prob)
			}
			if r.Delay {
				fmt.Fprintf(&b, " -j NFQUEUE --queue-num %d --queue-bypass\n", delayQueue)
			} else {
				b.WriteString(" -j DROP\n")
			}
		}
		b.WriteString("COMMIT\n")
		// -w waits for the xtables lock, which runs side by side share
		// under iptables-legacy. --noflush with -F INPUT empties the chain
		// and keeps it: made anew, its hook would be too, and the kernel
		// would drop the packets a delay queued through it.
		cmd := n.Host.Command("iptables-restore", "-w", "--noflush")
		cmd.Stdin = strings.NewReader(b.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nemesis: iptables-restore on %s: %w: %s", n.Name, err, out)
		}
	}
	return nil
}

func shuffled(nodes []string, rng *rand.Rand) []string {
	s := slices.Clone(nodes)
	rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	return s
}

func without(nodes []string, node string) []string {
	return slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == node })
}

func side(nodes []string) string { return strings.Join(slices.Sorted(slices.Values(nodes)), " ") }
