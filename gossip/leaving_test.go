package gossip

import (
	"slices"
	"testing"
	"time"
)

// TestLeaveWatchRevivesOnlyStuckLeaves: a member serf holds leaving is
// counted alive again only once it has been leaving for the bound with
// memberlist listing it alive throughout; a real leave (memberlist stops
// listing it alive, or serf moves it on) never is, and a revived member
// is forgotten when serf's status for it changes.
func TestLeaveWatchRevivesOnlyStuckLeaves(t *testing.T) {
	const bound = 5 * time.Second
	w := newLeaveWatch(bound)
	t0 := time.Unix(1000, 0)
	alive := map[string]bool{"stuck": true, "real": true, "flaky": true}
	isAlive := func(name string) bool { return alive[name] }
	at := func(d time.Duration, leaving ...string) []string { return w.observe(t0.Add(d), leaving, isAlive) }

	if got := at(0, "stuck", "real", "flaky"); len(got) != 0 {
		t.Fatalf("revived at first sight: %v", got)
	}
	alive["real"] = false // its memberlist leave arrived: serf will call it left
	if got := at(2*time.Second, "stuck", "real", "flaky"); len(got) != 0 {
		t.Fatalf("revived before the bound: %v", got)
	}
	alive["flaky"] = false // suspected for a moment: its clock starts again
	at(3*time.Second, "stuck", "flaky")
	alive["flaky"] = true
	at(4*time.Second, "stuck", "flaky")
	if got := at(bound-time.Millisecond, "stuck", "flaky"); len(got) != 0 {
		t.Fatalf("revived before the bound: %v", got)
	}
	if got := at(bound, "stuck", "flaky"); !slices.Equal(got, []string{"stuck"}) {
		t.Fatalf("at the bound revived %v, want [stuck]", got)
	}
	if !w.isRevived("stuck") || w.isRevived("flaky") || w.isRevived("real") {
		t.Fatal("isRevived disagrees with what observe returned")
	}
	if got := at(bound+time.Second, "stuck", "flaky"); len(got) != 0 {
		t.Fatalf("revived twice: %v", got)
	}
	if got := at(4*time.Second+bound, "stuck", "flaky"); !slices.Equal(got, []string{"flaky"}) {
		t.Fatalf("flaky revived as %v, want [flaky] a bound after it was last seen suspect", got)
	}
	// Serf moves both on (a join intent, or the member failed): forgotten.
	at(20 * time.Second)
	if w.isRevived("stuck") || w.isRevived("flaky") || len(w.since) > 0 || len(w.revived) > 0 {
		t.Fatal("members serf no longer holds leaving are still watched")
	}
	// Leaving again later starts a new wait.
	if got := at(30*time.Second, "stuck"); len(got) != 0 || w.isRevived("stuck") {
		t.Fatalf("a new leave was revived at once: %v", got)
	}
}
