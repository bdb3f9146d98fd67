package agent

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testlog"
)

// TestEpochsPerTermUnderChurn runs five nodes for ten minutes of simulated
// time with churn: every 5 to 25 s a random fault (a crash and restart, a
// partition and its repair, the leader isolated, a pause, a resign). Each
// term needs a new epoch, but failed lease rounds burn epochs too; a node
// that cannot win (cut off, refused) must not keep starting rounds. It
// reports epochs used per term (docs/RELIABILITY.md) and fails when more
// than maxEpochsPerTerm were burned on average.
func TestEpochsPerTermUnderChurn(t *testing.T) {
	const maxEpochsPerTerm = 3.0
	s := newCsim(t, testlog.Seed(t))
	s.addNodes(5)
	s.waitLeader(10 * time.Second)
	end := s.now.Add(10 * time.Minute)
	for s.now.Before(end) {
		name := s.order[s.rand.IntN(len(s.order))]
		n := s.nodes[name]
		switch s.rand.IntN(6) {
		case 0:
			s.crash(name)
			s.run(time.Duration(1+s.rand.IntN(10)) * time.Second)
			s.boot(name, s.expectFor(name))
		case 1:
			s.partition([]string{name}, without(s.order, name))
			s.run(time.Duration(1+s.rand.IntN(15)) * time.Second)
			s.heal()
		case 2:
			if l := s.leader(); l != "" {
				s.partition([]string{l}, without(s.order, l))
				s.run(time.Duration(1+s.rand.IntN(15)) * time.Second)
				s.heal()
			}
		case 3:
			a := s.order[:2]
			s.partition(a, without(without(s.order, a[0]), a[1]))
			s.run(time.Duration(1+s.rand.IntN(15)) * time.Second)
			s.heal()
		case 4:
			if n.up {
				n.paused = true
				s.run(time.Duration(1+s.rand.IntN(8)) * time.Second)
				n.paused = false
				s.syncViews()
			}
		case 5:
			if n.up {
				_ = n.c.resign(s.local(n, s.now))
				s.collect(name)
			}
		}
		s.run(time.Duration(5+s.rand.IntN(20)) * time.Second)
	}
	terms, highest := len(s.terms), uint64(0)
	for e := range s.terms {
		highest = max(highest, e)
	}
	for _, n := range s.nodes {
		highest = max(highest, n.epochs.epoch)
	}
	ratio := float64(highest) / float64(terms)
	t.Logf("10 min of churn: %d terms, highest epoch %d: %.2f epochs per term", terms, highest, ratio)
	if ratio > maxEpochsPerTerm {
		t.Fatalf("%.2f epochs per term, want at most %.1f", ratio, maxEpochsPerTerm)
	}
}

func without(xs []string, x string) []string {
	var out []string
	for _, y := range xs {
		if y != x {
			out = append(out, y)
		}
	}
	return out
}
