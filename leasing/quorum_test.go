package leasing

import (
	"fmt"
	"testing"
	"time"
)

// TestQuorumAgreesWithWon: for plain and joint rosters and every subset of
// grants, a round's count says Have >= Need exactly when the round is won.
// A joint roster that removes a voter from two ({a} joint with {a b}) used
// to count only the new set: a renewal granted by a alone failed while it
// reported granted=1 need=1.
func TestQuorumAgreesWithWon(t *testing.T) {
	a, b, c, d := Node{1, "a"}, Node{2, "b"}, Node{3, "c"}, Node{4, "d"}
	rosters := []Roster{
		Bootstrap([]Node{a, b, c}),
		Bootstrap([]Node{a, b}).Without(b, 1),
		Bootstrap([]Node{a, b}).With(c, 1),
		Bootstrap([]Node{a, b, c}).With(d, 1),
		Bootstrap([]Node{a, b, c, d}).Without(d, 1),
	}
	t0 := time.Unix(0, 0)
	for _, r := range rosters {
		members := r.Members()
		for mask := 0; mask < 1<<len(members); mask++ {
			rd := NewRound(1, Renew, 5, r, t0, time.Second)
			var granted []string
			for i, v := range members {
				if mask&(1<<i) != 0 {
					rd.Add(Reply{Seq: 1, Epoch: 5, Voter: v, Granted: true})
					granted = append(granted, v.Name)
				}
			}
			q := rd.Quorum()
			if (q.Have >= q.Need) != rd.Won() || q.Need == 0 {
				t.Errorf("%v granted by %v: quorum %+v, won=%v", r, granted, q, rd.Won())
			}
		}
	}
}

// TestRosterNeed: the need of a plain roster is its majority; of a joint
// one, the majority of its larger set.
func TestRosterNeed(t *testing.T) {
	a, b, c, d := Node{1, "a"}, Node{2, "b"}, Node{3, "c"}, Node{4, "d"}
	for _, tt := range []struct {
		r    Roster
		want int
	}{
		{Roster{}, 0},
		{Bootstrap([]Node{a}), 1},
		{Bootstrap([]Node{a, b, c}), 2},
		{Bootstrap([]Node{a, b, c}).With(d, 1), 3},
		{Bootstrap([]Node{a, b}).Without(b, 1), 2},
	} {
		if got := tt.r.Need(); got != tt.want {
			t.Errorf("%v: need %d, want %d", tt.r, got, tt.want)
		}
	}
}

// TestRoundNamesRefusalsAndSilence: a round tells who refused, with the
// reason (and for a promise, its holder), and who has not answered.
func TestRoundNamesRefusalsAndSilence(t *testing.T) {
	a, b, c, d := Node{1, "a"}, Node{2, "b"}, Node{3, "c"}, Node{4, "d"}
	rd := NewRound(1, Acquire, 3, Bootstrap([]Node{a, b, c, d}), time.Unix(0, 0), time.Second)
	e := Node{5, "e"}
	rd.Add(Reply{Seq: 1, Epoch: 3, Voter: d, Reason: ReasonPromised, Holder: e, Remaining: time.Second})
	rd.Add(Reply{Seq: 1, Epoch: 3, Voter: a, Granted: true})
	rd.Add(Reply{Seq: 1, Epoch: 3, Voter: b, Reason: ReasonStaleEpoch})
	if got := fmt.Sprint(rd.Refused()); got != "[{{2 b} stale-epoch {0 }} {{4 d} promised {5 e}}]" {
		t.Errorf("refused %s", got)
	}
	if got := fmt.Sprint(rd.Silent()); got != "[{3 c}]" {
		t.Errorf("silent %s", got)
	}
}
