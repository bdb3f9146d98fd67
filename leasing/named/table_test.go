package named

import (
	"fmt"
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

// TestPartitionsMoveOnlyWhatMust: members join a group of twelve
// partitions one by one; after each join the partitions are within one of
// an even share, and only partitions of members above their share moved.
func TestPartitionsMoveOnlyWhatMust(t *testing.T) {
	tb := newTestTable(3, 0)
	now := t0
	const parts = 12
	owner := map[string]string{}
	sessions := map[string]uint64{}
	var members []string
	seq := uint64(0)
	ask := func(m string) {
		for p := range parts {
			name := fmt.Sprintf("g/%d", p)
			if owner[name] == m {
				continue
			}
			seq++
			rep, pushes := tb.Handle(now, Request{Op: OpAcquire, Term: 3, Seq: seq, Name: name, Holder: holder(m, sessions[m]), TTL: 10 * time.Second, Wait: true, Policy: Share, Group: "g"})
			for _, r := range append(pushes, rep) {
				if r.Code == CodeGranted {
					owner[r.Name] = r.Holder.Node.Name
				}
			}
		}
	}
	settle := func() {
		for range 20 {
			now = now.Add(200 * time.Millisecond)
			for _, r := range tb.Tick(now) {
				owner[r.Name] = r.Holder.Node.Name
			}
			// Members renew; a revoked partition is given back and asked for again.
			for name, m := range owner {
				seq++
				rep, _ := tb.Handle(now, Request{Op: OpRenew, Term: 3, Seq: seq, Name: name, Holder: holder(m, sessions[m]), Token: tokenOf(tb, name), TTL: 10 * time.Second, Policy: Share, Group: "g"})
				if rep.Revoke {
					_, pushes := tb.Handle(now, Request{Op: OpRelease, Term: 3, Seq: seq, Name: name, Holder: holder(m, sessions[m]), Token: rep.Token})
					delete(owner, name)
					for _, r := range pushes {
						owner[r.Name] = r.Holder.Node.Name
					}
					ask(m)
				}
			}
		}
	}
	for i, m := range []string{"a", "b", "c", "d", "e"} {
		sessions[m] = uint64(i + 1)
		members = append(members, m)
		before := map[string]string{}
		for k, v := range owner {
			before[k] = v
		}
		ask(m)
		settle()
		count := map[string]int{}
		for p := range parts {
			name := fmt.Sprintf("g/%d", p)
			o, ok := owner[name]
			if !ok {
				t.Fatalf("after %s joined, %s has no owner", m, name)
			}
			count[o]++
		}
		low, high := parts/len(members), (parts+len(members)-1)/len(members)
		for _, mm := range members {
			if count[mm] < low || count[mm] > high {
				t.Fatalf("after %s joined: %v, want each within [%d, %d]", m, count, low, high)
			}
		}
		moved := 0
		for name, o := range before {
			if owner[name] != o {
				moved++
				if owner[name] != m {
					t.Fatalf("%s moved from %s to %s, not to the newcomer %s", name, o, owner[name], m)
				}
			}
		}
		if i > 0 && moved > high {
			t.Fatalf("after %s joined, %d partitions moved; at most %d must", m, moved, high)
		}
	}
}

func tokenOf(tb *Table, name string) uint64 {
	for _, in := range tb.List(t0) {
		if in.Name == name {
			return in.Token
		}
	}
	return 0
}
