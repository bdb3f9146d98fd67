package gossip

import (
	"testing"
	"time"
)

// TestSetEligibleSpreads: a node that stops advertising eligibility is seen
// ineligible by the others, keeps that through a later SetTags, and is
// seen eligible again once it says so.
func TestSetEligibleSpreads(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	seen := func(eligible bool, rack string) func() bool {
		return func() bool {
			m := nodes[0].Members()[1]
			return m.Eligible == eligible && m.Tags["rack"] == rack && m.ID == 101
		}
	}
	if err := nodes[1].SetEligible(false, map[string]string{"rack": "r1"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "ineligible", seen(false, "r1"))
	if nodes[1].LocalMember().Eligible {
		t.Fatal("the node itself still reads eligible")
	}
	if err := nodes[1].SetTags(map[string]string{"rack": "r2"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "still ineligible after SetTags", seen(false, "r2"))
	if err := nodes[1].SetEligible(true, map[string]string{"rack": "r2"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "eligible again", seen(true, "r2"))
	if err := nodes[1].SetEligible(true, map[string]string{"e": "1"}); err == nil {
		t.Fatal("SetEligible accepted a reserved key")
	}
}
