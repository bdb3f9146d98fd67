package named

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/leasing"
)

var t0 = time.Unix(1000, 0)

func holder(node string, session uint64) Holder {
	return Holder{Node: leasing.Node{Name: node, ID: 1}, Session: session}
}

func newTestTable(term uint64, grace time.Duration) *Table {
	return NewTable(Config{MinTTL: time.Second, MaxTTL: 30 * time.Second, Gather: 100 * time.Millisecond}, term, t0, grace)
}

func TestFIFOGrantsInArrivalOrderAndTokensGrow(t *testing.T) {
	tb := newTestTable(7, 0)
	now := t0
	rep, _ := tb.Handle(now, Request{Op: OpAcquire, Term: 7, Seq: 1, Name: "db", Holder: holder("a", 1), TTL: 10 * time.Second, Wait: true})
	if rep.Code != CodeGranted || rep.Token != Token(7, 1) {
		t.Fatalf("first acquire: %+v", rep)
	}
	for i, n := range []string{"b", "c"} {
		rep, _ := tb.Handle(now, Request{Op: OpAcquire, Term: 7, Seq: 2, Name: "db", Holder: holder(n, 1), TTL: 10 * time.Second, Wait: true})
		if rep.Code != CodeQueued || rep.Position != i+1 {
			t.Fatalf("%s: %+v", n, rep)
		}
	}
	rep, _ = tb.Handle(now, Request{Op: OpAcquire, Term: 7, Seq: 3, Name: "db", Holder: holder("d", 1), TTL: 10 * time.Second})
	if rep.Code != CodeBusy || rep.Current != "a" {
		t.Fatalf("try-once: %+v", rep)
	}
	_, pushes := tb.Handle(now, Request{Op: OpRelease, Term: 7, Seq: 4, Name: "db", Holder: holder("a", 1), Token: Token(7, 1)})
	if len(pushes) != 1 || pushes[0].Holder != holder("b", 1) || pushes[0].Token != Token(7, 2) {
		t.Fatalf("release handed to %+v, want b with token 2", pushes)
	}
	// c keeps its place; b's lease runs out: c gets it, with a higher token.
	tb.Handle(now.Add(5*time.Second), Request{Op: OpAcquire, Term: 7, Seq: 5, Name: "db", Holder: holder("c", 1), TTL: 10 * time.Second, Wait: true})
	pushes = tb.Tick(now.Add(11 * time.Second))
	if len(pushes) != 1 || pushes[0].Holder != holder("c", 1) || pushes[0].Token != Token(7, 3) {
		t.Fatalf("expiry handed to %+v, want c with token 3", pushes)
	}
}

func TestGraceAdoptsReclaimsOnly(t *testing.T) {
	tb := newTestTable(9, 10*time.Second)
	old := Token(8, 5)
	rep, _ := tb.Handle(t0, Request{Op: OpRenew, Term: 9, Seq: 1, Name: "db", Holder: holder("a", 1), Token: old, TTL: 10 * time.Second})
	if rep.Code != CodeGranted || rep.Token != old {
		t.Fatalf("re-claim in the grace: %+v", rep)
	}
	rep, _ = tb.Handle(t0, Request{Op: OpRenew, Term: 9, Seq: 1, Name: "db", Holder: holder("b", 1), Token: Token(8, 6), TTL: 10 * time.Second})
	if rep.Code != CodeLost {
		t.Fatalf("a second re-claim of the same name: %+v", rep)
	}
	rep, _ = tb.Handle(t0, Request{Op: OpAcquire, Term: 9, Seq: 1, Name: "free", Holder: holder("b", 1), TTL: 10 * time.Second})
	if rep.Code != CodeBusy {
		t.Fatalf("a new grant in the grace: %+v", rep)
	}
	rep, _ = tb.Handle(t0.Add(11*time.Second), Request{Op: OpRenew, Term: 9, Seq: 1, Name: "gone", Holder: holder("c", 1), Token: Token(8, 7), TTL: 10 * time.Second})
	if rep.Code != CodeLost {
		t.Fatalf("a re-claim after the grace: %+v", rep)
	}
	rep, _ = tb.Handle(t0, Request{Op: OpAcquire, Term: 8, Seq: 1, Name: "db", Holder: holder("b", 1), TTL: 10 * time.Second})
	if rep.Code != CodeNotLeader {
		t.Fatalf("a request for another term: %+v", rep)
	}
}

// shareGroup drives a Table as the members of one Share group do: each
// member queues for every partition it does not hold, renews what it
// holds, and gives back (then asks again for) a partition the leader
// revokes.
type shareGroup struct {
	tb       *Table
	now      time.Time
	parts    int
	owner    map[string]string // partition name -> member
	sessions map[string]uint64
	dead     map[string]bool  // stopped renewing and asking
	only     map[string][]int // the partitions a member asks for, when not all
	seq      uint64
	ticks    int
}

func newShareGroup(parts int) *shareGroup {
	return &shareGroup{tb: newTestTable(3, 0), now: t0, parts: parts, owner: map[string]string{}, sessions: map[string]uint64{}, dead: map[string]bool{}, only: map[string][]int{}}
}

func (g *shareGroup) name(p int) string { return fmt.Sprintf("g/%d", p) }

// join starts member m's session and queues it for every partition.
func (g *shareGroup) join(m string) {
	g.sessions[m] = uint64(len(g.sessions) + 1)
	g.ask(m)
}

func (g *shareGroup) ask(m string) {
	for p := range g.parts {
		name := g.name(p)
		if g.owner[name] == m || g.only[m] != nil && !slices.Contains(g.only[m], p) {
			continue
		}
		g.seq++
		rep, pushes := g.tb.Handle(g.now, Request{Op: OpAcquire, Term: 3, Seq: g.seq, Name: name, Holder: holder(m, g.sessions[m]), TTL: 10 * time.Second, Wait: true, Policy: Share, Group: "g"})
		g.record(append(pushes, rep))
	}
}

func (g *shareGroup) record(reps []Reply) {
	for _, r := range reps {
		if r.Code == CodeGranted {
			g.owner[r.Name] = r.Holder.Node.Name
		}
	}
}

// renew renews the partitions live member m holds.
func (g *shareGroup) renew(m string) {
	for _, name := range slices.Sorted(maps.Keys(g.owner)) {
		if g.owner[name] != m {
			continue
		}
		g.seq++
		rep, _ := g.tb.Handle(g.now, Request{Op: OpRenew, Term: 3, Seq: g.seq, Name: name, Holder: holder(m, g.sessions[m]), Token: tokenOf(g.tb, name), TTL: 10 * time.Second, Policy: Share, Group: "g"})
		if rep.Revoke {
			_, pushes := g.tb.Handle(g.now, Request{Op: OpRelease, Term: 3, Seq: g.seq, Name: name, Holder: holder(m, g.sessions[m]), Token: rep.Token})
			delete(g.owner, name)
			g.record(pushes)
			g.ask(m)
		}
	}
}

// kill stops m: the leader drops its waits, its leases run out.
func (g *shareGroup) kill(m string) {
	g.dead[m] = true
	g.record(g.tb.DropNode(g.now, m))
}

// settle runs n ticks of 200 ms, the live members renewing after each
// and asking again every 3 s (a third of the TTL) to keep their places.
func (g *shareGroup) settle(n int) {
	for range n {
		g.ticks++
		g.now = g.now.Add(200 * time.Millisecond)
		for _, r := range g.tb.Tick(g.now) {
			g.owner[r.Name] = r.Holder.Node.Name
		}
		for _, m := range slices.Sorted(maps.Keys(g.sessions)) {
			if !g.dead[m] {
				g.renew(m)
				if g.ticks%15 == 0 {
					g.ask(m)
				}
			}
		}
		// A dead member's leases run out: take the owners from the table.
		clear(g.owner)
		for _, in := range g.tb.List(g.now) {
			if in.Held {
				g.owner[in.Name] = in.Holder.Node.Name
			}
		}
	}
}

func (g *shareGroup) snapshot() map[string]string { return maps.Clone(g.owner) }

// checkShares fails unless every partition has an owner among members and
// each member holds its share rounded down or up.
func (g *shareGroup) checkShares(t *testing.T, when string, members []string) {
	t.Helper()
	count := map[string]int{}
	for p := range g.parts {
		o, ok := g.owner[g.name(p)]
		if !ok {
			t.Fatalf("%s, %s has no owner", when, g.name(p))
		}
		count[o]++
	}
	low, high := g.parts/len(members), (g.parts+len(members)-1)/len(members)
	for _, m := range members {
		if count[m] < low || count[m] > high {
			t.Fatalf("%s: %v, want each of %v within [%d, %d]", when, count, members, low, high)
		}
	}
}

// TestPartitionsMoveOnlyWhatMust: members join a group of twelve
// partitions one by one; after each join the partitions are within one of
// an even share, and only partitions of members above their share moved.
func TestPartitionsMoveOnlyWhatMust(t *testing.T) {
	g := newShareGroup(12)
	var members []string
	for i, m := range []string{"a", "b", "c", "d", "e"} {
		members = append(members, m)
		before := g.snapshot()
		g.join(m)
		g.settle(20)
		g.checkShares(t, "after "+m+" joined", members)
		high := (g.parts + len(members) - 1) / len(members)
		moved := 0
		for name, o := range before {
			if g.owner[name] != o {
				moved++
				if g.owner[name] != m {
					t.Fatalf("%s moved from %s to %s, not to the newcomer %s", name, o, g.owner[name], m)
				}
			}
		}
		if i > 0 && moved > high {
			t.Fatalf("after %s joined, %d partitions moved; at most %d must", m, moved, high)
		}
	}
}

// TestPartitionsOfAFailedMemberMoveAlone: a member holding two of ten
// partitions among five fails, and its leases run out one after the
// other. Only its partitions move: the member whose agent is gone is not
// a poor member to revoke partitions for while its last lease runs out.
func TestPartitionsOfAFailedMemberMoveAlone(t *testing.T) {
	g := newShareGroup(10)
	members := []string{"a", "b", "c", "d", "e"}
	for _, m := range members {
		g.join(m)
		g.settle(20)
	}
	g.checkShares(t, "before the failure", members)
	var held []string
	for _, name := range slices.Sorted(maps.Keys(g.owner)) {
		if g.owner[name] == "e" {
			held = append(held, name)
		}
	}
	if len(held) != 2 {
		t.Fatalf("e holds %v, want two partitions", held)
	}
	// e renews its first partition 2 s after its second, then fails: the
	// two leases run out 2 s apart.
	g.now = g.now.Add(2 * time.Second)
	g.seq++
	g.tb.Handle(g.now, Request{Op: OpRenew, Term: 3, Seq: g.seq, Name: held[0], Holder: holder("e", g.sessions["e"]), Token: tokenOf(g.tb, held[0]), TTL: 10 * time.Second, Policy: Share, Group: "g"})
	before := g.tb.List(g.now)
	g.kill("e")
	g.settle(80)
	g.checkShares(t, "after e failed", members[:4])
	after := map[string]Info{}
	var last, lastBefore uint64
	for _, in := range g.tb.List(g.now) {
		after[in.Name] = in
		last = max(last, in.Token)
	}
	for _, in := range before {
		lastBefore = max(lastBefore, in.Token)
	}
	if grants := last - lastBefore; grants != uint64(len(held)) {
		t.Errorf("%d grants after e failed, want %d: one for each of its partitions", grants, len(held))
	}
	for _, in := range before {
		if a := after[in.Name]; in.Holder.Node.Name != "e" && (a.Holder != in.Holder || a.Token != in.Token) {
			t.Errorf("%s moved from %s (token %d) to %s (token %d), though only e's partitions had to", in.Name, in.Holder.Node.Name, in.Token, a.Holder.Node.Name, a.Token)
		}
	}
}

// TestPartitionsRevokedOnlyForAWaiter: a member that asks for some of a
// group's partitions only (a client of its own, or a member whose other
// requests have not come yet) is owed a partition, and the one revoked for
// it must be one it waits for. Revoking another (the richest member's last
// by name) handed that partition straight back to its holder, and again
// at every tick: the holder's command restarted every second or two while
// the poor member never got anything (the random schedules found it).
func TestPartitionsRevokedOnlyForAWaiter(t *testing.T) {
	g := newShareGroup(2)
	g.join("a")
	g.settle(10)
	before := grantsOf(g.tb)
	g.only["b"] = []int{0}
	g.join("b")
	g.settle(40)
	g.checkShares(t, "after b joined for g/0 only", []string{"a", "b"})
	if g.owner["g/0"] != "b" {
		t.Fatalf("owners %v: want b to hold g/0, the partition it waits for", g.owner)
	}
	if n := grantsOf(g.tb) - before; n != 1 {
		t.Errorf("%d grants after b joined, want 1: only g/0 moves, once", n)
	}
}

// grantsOf is how many grants tb's term has made: the low half of its
// latest token.
func grantsOf(tb *Table) uint32 {
	var last uint64
	for _, in := range tb.List(t0) {
		last = max(last, in.Token)
	}
	return uint32(last)
}

func tokenOf(tb *Table, name string) uint64 {
	for _, in := range tb.List(t0) {
		if in.Name == name {
			return in.Token
		}
	}
	return 0
}
