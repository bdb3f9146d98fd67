package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testlog"
)

// TestUnstoredGrantsKeepTheNodeFailed: a voter whose data dir took the
// epoch file's write but not the voter file's (a disk full to within a
// few blocks) refuses the new term's grants. Its retry rewrote only the
// epoch file, which was on disk already, so it stored nothing and
// declared the data dir writable every five seconds, made the node
// eligible, and failed again at the next grant. The retry now writes a
// probe file too: the node stays failed, and not eligible, until the
// disk takes writes, and recovers once it does.
func TestUnstoredGrantsKeepTheNodeFailed(t *testing.T) {
	s := newCsim(t, testlog.Seed(t))
	s.addNodes(3)
	l, _ := s.waitLeader(10*time.Second, "n3")
	n1 := s.nodes["n1"]
	n1.grants.failed = true
	s.askSuccessor(s.nodes[l])
	_ = s.nodes[l].c.resign(s.local(s.nodes[l], s.now))
	s.collect(l)
	for end := s.now.Add(3 * s.ttl); n1.c.disk.err == nil; s.tick() {
		if s.now.After(end) {
			t.Fatalf("n1 stored no grant of the new term and reports no failed write\n%s", s.dump())
		}
	}
	failedAt := s.now
	for end := s.now.Add(6 * storageRetryInterval); s.now.Before(end); s.tick() {
		if n1.c.disk.err == nil {
			t.Fatalf("%v after its grant could not be stored, n1 reports that writes succeed (and may lead) while its disk fails every write",
				s.now.Sub(failedAt))
		}
	}
	n1.grants.failed = false // space freed
	for end := s.now.Add(2 * storageRetryInterval); n1.c.disk.err != nil; s.tick() {
		if s.now.After(end) {
			t.Fatalf("n1 still reports %v after its disk was freed", n1.c.disk.err)
		}
	}
}

// TestSuccessorWithFullDiskIsNotNamed: a node learns that its disk is full
// only at a write, and a follower may not have written for long. Asked
// whether it can take the term, it writes a probe first: named by a
// transfer it refuses, and the leader keeps its term; as the natural
// successor of a resign it is passed over, and the next node takes over
// at once. Before, it was named, failed to store the new term's epoch,
// and the cluster had no leader for the transfer window, after which the
// election picked a node the operator had not asked for.
func TestSuccessorWithFullDiskIsNotNamed(t *testing.T) {
	s := newCsim(t, testlog.Seed(t))
	s.addNodes(5)
	s.waitLeader(10*time.Second, "n5")
	n5, n4 := s.nodes["n5"], s.nodes["n4"]
	n4.epochs.failed = true // the disk filled since n4's last write
	first := n5.led[len(n5.led)-1]
	s.askSuccessor(n5)
	if err := n5.c.resign(s.local(n5, s.now)); err != nil {
		t.Fatal(err)
	}
	s.collect("n5")
	next, took := s.waitLeader(s.ttl)
	if next != "n3" || took > s.ttl/4 {
		t.Fatalf("after n5 resigned with n4's disk full: %s leads after %v; want n3 at once\n%s", next, took, s.dump())
	}
	if led := s.ledSince(first + 1); len(led) != 1 {
		t.Fatalf("terms since the resign: %v; want n3's alone", led)
	}
	t.Logf("n3 led %v after the resign", took)
	if n4.c.storageFailure() == nil {
		t.Fatal("n4's failed probe left its data dir counted writable")
	}

	// A transfer to n4 is refused with the reason; n3 keeps its term.
	s.run(s.ttl)
	n3 := s.nodes["n3"]
	if r := n4.c.canTake(s.local(n4, s.now)); !strings.Contains(r.Refused, "cannot write its data dir") {
		t.Fatalf("n4, with a full disk, answers %+v; want a refusal that names the data dir", r)
	}
	if r := n3.c.canTake(s.local(n3, s.now)); r.Refused != "" {
		t.Fatalf("n3 refuses the term: %s", r.Refused)
	}
	s.setDrained("n2", true)
	if r := s.nodes["n2"].c.canTake(s.local(s.nodes["n2"], s.now)); !strings.Contains(r.Refused, "may not lead") {
		t.Fatalf("n2, drained, answers %+v; want a refusal", r)
	}
}

// TestLeaderWithFailedDiskAsksItsSuccessor: the leader n5's disk fails
// (its voter cannot store its next grant) while n4, its natural
// successor, is frozen. The leader steps down as a drained one does: it
// asks n4 first, passes over it, and names n3, which leads at once, and
// no other term comes between. Before, the leader stepped down at the
// failed write naming n4, which nobody had asked, and the cluster had no
// leader for the transfer window (checkYields fails the run at such a
// hand-over).
func TestLeaderWithFailedDiskAsksItsSuccessor(t *testing.T) {
	s := newCsim(t, testlog.Seed(t))
	s.addNodes(5)
	s.waitLeader(10*time.Second, "n5")
	n5 := s.nodes["n5"]
	first := n5.led[len(n5.led)-1]
	s.nodes["n4"].paused = true
	n5.epochs.failed, n5.grants.failed = true, true
	// A later epoch reaches it (a lease request of a candidate that could
	// not hear it), which it must store before it uses or grants it: the
	// write fails.
	n5.c.observeEpoch(first + 1)
	n5.c.process(s.local(n5, s.now))
	s.collect("n5")
	if n5.c.storageFailure() == nil {
		t.Fatalf("n5 stored epoch %d on a failed disk", first+1)
	}
	next, took := s.waitLeader(s.ttl, "n3")
	if next != "n3" || took > s.ttl/4 {
		t.Fatalf("after n5's disk failed with n4 frozen: %s leads after %v; want n3 at once\n%s", next, took, s.dump())
	}
	if led := s.ledSince(first + 1); len(led) != 1 {
		t.Fatalf("terms since n5's disk failed: %v; want n3's alone", led)
	}
	t.Logf("n3 led %v after n5 found its disk failed", took)
}
