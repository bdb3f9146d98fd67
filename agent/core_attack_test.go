package agent

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/internal/testlog"
	"github.com/tenurehq/tenure/leasing"
)

// TestForgedEpochsAreRefused: one forged ELECTION and COORDINATOR per
// agent naming the largest epoch, and a forged release and acquire at it
// sent to every voter (as anyone could without a cluster key), leave the
// epochs where they were: nothing is persisted, the leader keeps leading
// and later terms get ordinary epochs (before: every agent persisted
// 2^64−1, the next win wrapped to 0, and the cluster stayed leaderless).
func TestForgedEpochsAreRefused(t *testing.T) {
	s := newCsim(t, testlog.Seed(t))
	s.addNodes(3)
	l, _ := s.waitLeader(10 * time.Second)
	evil := bully.Node{ID: 99, Name: "evil"}
	const top = 1<<64 - 1
	for _, name := range s.order {
		n := s.nodes[name]
		now := s.local(n, s.now)
		to := bully.Node{ID: n.id, Name: name}
		n.c.receive(now, envelope{Bully: &bully.Message{Type: bully.MsgElection, From: evil, To: to, Epoch: top}})
		n.c.receive(now, envelope{Bully: &bully.Message{Type: bully.MsgCoordinator, From: evil, To: to, Leader: evil, Term: top}})
		r := n.c.roster()
		req := leasing.Request{Kind: leasing.Release, Candidate: toLeasing(evil), Epoch: top, TTL: s.ttl,
			ClusterID: r.ClusterID, RosterVersion: r.Version, RosterEpoch: r.Epoch}
		n.c.receive(now, envelope{Lease: &req})
		req.Kind = leasing.Acquire
		if rep := n.c.receive(now, envelope{Lease: &req}); rep.LeaseReply.Granted {
			t.Fatalf("%s granted a forged acquire at epoch %d", name, uint64(top))
		}
		s.collect(name)
	}
	s.run(s.ttl)
	for _, name := range s.order {
		if n := s.nodes[name]; n.epochs.epoch > 1000 || n.grants.epoch > 1000 {
			t.Fatalf("%s persisted epoch %d, granted %d", name, n.epochs.epoch, n.grants.epoch)
		}
	}
	if s.leader() != l {
		t.Fatalf("leader %q, want %s still\n%s", s.leader(), l, s.dump())
	}
	ln := s.nodes[l]
	_ = ln.c.resign(s.local(ln, s.now))
	s.collect(l)
	next, _ := s.waitLeader(3 * s.ttl)
	if e := s.nodes[next].led[len(s.nodes[next].led)-1]; e == 0 || e > 1000 {
		t.Fatalf("the next term got epoch %d", e)
	}
}
