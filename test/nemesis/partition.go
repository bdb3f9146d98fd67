//go:build nemesis

package nemesis

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/tenurehq/tenure/test/nemesis/check"
)

// Drop is one iptables rule on a node's INPUT chain: packets from From
// are dropped (only UDP ones if UDP, only TCP ones to port TCPPort if it
// is set; each with probability Prob if it is above 0).
type Drop struct {
	On, From string
	UDP      bool
	TCPPort  int
	Prob     float64
}

// peerPort is the port of every agent's peer transport (--peer-bind).
const peerPort = 7947

// Partition is a network fault between the agents' hosts, as the DROP
// rules that make it. The store's host is never cut off.
type Partition struct {
	Kind   string // halves, isolate, ring, bridge, one-way, udp, loss
	Detail string // who is cut from whom, for the events and the report
	Drops  []Drop
}

// cutBoth drops every packet between each node of a and each of b.
func cutBoth(a, b []string) []Drop {
	var d []Drop
	for _, x := range a {
		for _, y := range b {
			d = append(d, Drop{On: x, From: y}, Drop{On: y, From: x})
		}
	}
	return d
}

// Halves cuts the nodes, shuffled, into a minority and a majority.
func Halves(nodes []string, rng *rand.Rand) Partition {
	s := shuffled(nodes, rng)
	a, b := s[:len(s)/2], s[len(s)/2:]
	return Partition{Kind: "halves", Detail: side(a) + " | " + side(b), Drops: cutBoth(a, b)}
}

// Isolate cuts one node from all others.
func Isolate(nodes []string, node string) Partition {
	rest := without(nodes, node)
	return Partition{Kind: "isolate", Detail: node + " | " + side(rest), Drops: cutBoth([]string{node}, rest)}
}

// Ring puts the nodes, shuffled, on a ring where each reaches only its
// two neighbours: with five nodes each sees a majority (itself and two),
// and no two see the same one.
func Ring(nodes []string, rng *rand.Rand) Partition {
	s := shuffled(nodes, rng)
	var d []Drop
	for i, x := range s {
		for j, y := range s {
			if dist := (j - i + len(s)) % len(s); dist > 1 && dist < len(s)-1 {
				d = append(d, Drop{On: x, From: y})
			}
		}
	}
	return Partition{Kind: "ring", Detail: "ring " + strings.Join(s, "-") + "-" + s[0], Drops: d}
}

// Bridge cuts the nodes but one, shuffled, into two halves that cannot
// reach each other; the one left reaches both.
func Bridge(nodes []string, rng *rand.Rand) Partition {
	s := shuffled(nodes, rng)
	b, rest := s[0], s[1:]
	a, c := rest[:len(rest)/2], rest[len(rest)/2:]
	return Partition{Kind: "bridge", Detail: fmt.Sprintf("%s | %s | %s, %s bridging", side(a), b, side(c), b),
		Drops: cutBoth(a, c)}
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
	var d []Drop
	for _, x := range to {
		for _, y := range from {
			d = append(d, Drop{On: x, From: y})
		}
	}
	return Partition{Kind: "one-way", Detail: side(from) + " -/-> " + side(to), Drops: d}
}

// UDPCut drops the UDP packets between one node and all others, both
// ways: gossip's probes fail while TCP (the peer port, memberlist's TCP
// fallback probes and push-pull) works.
func UDPCut(nodes []string, node string) Partition {
	var d []Drop
	for _, x := range without(nodes, node) {
		d = append(d, Drop{On: x, From: node, UDP: true}, Drop{On: node, From: x, UDP: true})
	}
	return Partition{Kind: "udp", Detail: node + " | " + side(without(nodes, node)) + ", UDP only", Drops: d}
}

// CutBut cuts node from every other node but keep, which still reaches
// it both ways.
func CutBut(nodes []string, node, keep string) Partition {
	rest := without(without(nodes, node), keep)
	return Partition{Kind: "cut-but", Detail: fmt.Sprintf("%s | %s, %s reaching both", node, side(rest), keep),
		Drops: cutBoth([]string{node}, rest)}
}

// PeerCutBut cuts node's peer transport (TCP to the peer port, both
// ways) from every node but keep, while gossip still reaches all: node
// stays alive to every member, and answers keep, but reaches no other
// voter's peer port.
func PeerCutBut(nodes []string, node, keep string) Partition {
	rest := without(without(nodes, node), keep)
	var d []Drop
	for _, y := range rest {
		d = append(d, Drop{On: node, From: y, TCPPort: peerPort}, Drop{On: y, From: node, TCPPort: peerPort})
	}
	return Partition{Kind: "peer-cut-but", Detail: fmt.Sprintf("%s | %s (peer port), %s reaching both", node, side(rest), keep), Drops: d}
}

// Loss drops each packet between any two nodes with probability p.
func Loss(nodes []string, p float64) Partition {
	var d []Drop
	for _, x := range nodes {
		for _, y := range without(nodes, x) {
			d = append(d, Drop{On: x, From: y, Prob: p})
		}
	}
	return Partition{Kind: "loss", Detail: fmt.Sprintf("%.0f%% of packets between agents dropped", p*100), Drops: d}
}

// Partition records p and applies it: each node's INPUT chain is replaced
// by p's rules for it (nodes p does not name get an empty chain).
func (c *Cluster) Partition(p Partition) error {
	if _, err := c.events.Record(check.EventPartition, nil, p.Kind+": "+p.Detail); err != nil {
		return err
	}
	return c.setRules(p.Drops)
}

// HealNetwork empties every node's INPUT chain.
func (c *Cluster) HealNetwork() error { return c.setRules(nil) }

func (c *Cluster) setRules(drops []Drop) error {
	for _, n := range c.nodes {
		var b strings.Builder
		b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n")
		for _, d := range drops {
			if d.On != n.Name {
				continue
			}
			from := c.Node(d.From)
			if from == nil {
				return fmt.Errorf("nemesis: partition names unknown node %q", d.From)
			}
			fmt.Fprintf(&b, "-A INPUT -s %s/32", from.Host.Addr)
			switch {
			case d.UDP:
				b.WriteString(" -p udp")
			case d.TCPPort != 0:
				fmt.Fprintf(&b, " -p tcp --dport %d", d.TCPPort)
			}
			if d.Prob > 0 {
				fmt.Fprintf(&b, " -m statistic --mode random --probability %.3f", d.Prob)
			}
			b.WriteString(" -j DROP\n")
		}
		b.WriteString("COMMIT\n")
		cmd := n.Host.Command("iptables-restore", "-w") // wait for the xtables lock, which runs side by side share under iptables-legacy
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
