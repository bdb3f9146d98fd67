package agent

import (
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
	for end := s.now.Add(3 * s.ttl); n1.c.storage == nil; s.tick() {
		if s.now.After(end) {
			t.Fatalf("n1 stored no grant of the new term and reports no failed write\n%s", s.dump())
		}
	}
	failedAt := s.now
	for end := s.now.Add(6 * storageRetryInterval); s.now.Before(end); s.tick() {
		if n1.c.storage == nil {
			t.Fatalf("%v after its grant could not be stored, n1 reports that writes succeed (and may lead) while its disk fails every write",
				s.now.Sub(failedAt))
		}
	}
	n1.grants.failed = false // space freed
	for end := s.now.Add(2 * storageRetryInterval); n1.c.storage != nil; s.tick() {
		if s.now.After(end) {
			t.Fatalf("n1 still reports %v after its disk was freed", n1.c.storage)
		}
	}
}
