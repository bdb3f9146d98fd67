//go:build nemesis

package nemesis

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestQuorateFindsTheConnectedMajority(t *testing.T) {
	six := append(slices.Clone(five), "h6") // h6 runs, but does not vote
	rng := rand.New(rand.NewPCG(1, 0))
	halves := Halves(five, rng)
	three := Quorate(five, five, halves)
	if len(three) != 3 || !connected(halves, three) {
		t.Fatalf("halves %s: %v, want the side of three", halves.Detail, three)
	}
	bridge := Bridge(five, rng)
	if got := Quorate(five, five, bridge); len(got) != 3 {
		t.Fatalf("bridge %s: %v, want a half and the bridge", bridge.Detail, got)
	}
	for _, c := range []struct {
		name      string
		voters    []string
		up        []string
		p         Partition
		want      []string
		wantEmpty bool
	}{
		{name: "no fault", voters: five, up: six, want: five},
		{name: "leader isolated", voters: five, up: six, p: Isolate(six, "h3"), want: []string{"h1", "h2", "h4", "h5"}},
		{name: "ring", voters: five, up: five, p: Ring(five, rng), wantEmpty: true},
		{name: "one way", voters: five, up: five, p: OneWay(five, rng), want: nil /* checked below */},
		{name: "leader's UDP cut", voters: five, up: five, p: UDPCut(five, "h5"), want: []string{"h1", "h2", "h3", "h4"}},
		{name: "loss everywhere", voters: five, up: five, p: Loss(five, 0.05), wantEmpty: true},
		{name: "short delays", voters: five, up: five, p: Delay(five, 20*time.Millisecond), want: five},
		{name: "long delays", voters: five, up: five, p: Delay(five, 400*time.Millisecond), wantEmpty: true},
		{name: "slow leader", voters: five, up: five, p: Slow(five, "h2", 1500*time.Millisecond), want: []string{"h1", "h3", "h4", "h5"}},
		{name: "a voter down", voters: five, up: []string{"h1", "h3", "h4", "h5", "h6"}, want: []string{"h1", "h3", "h4", "h5"}},
		{name: "three voters down", voters: five, up: []string{"h1", "h2", "h6"}, wantEmpty: true},
		{name: "half of four", voters: []string{"h1", "h2", "h3", "h4"}, up: []string{"h1", "h2", "h5"}, wantEmpty: true},
	} {
		got := Quorate(c.voters, c.up, c.p)
		switch {
		case c.name == "one way":
			// The larger side hears only itself, and is a majority.
			if len(got) != 3 || !connected(c.p, got) {
				t.Errorf("%s (%s): %v", c.name, c.p.Detail, got)
			}
		case c.wantEmpty && got != nil:
			t.Errorf("%s: %v, want none", c.name, got)
		case !c.wantEmpty && !slices.Equal(got, c.want):
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
