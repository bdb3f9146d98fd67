package agent

import (
	"cmp"
	"fmt"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testlog"
)

// TestSlowLinksKeepTheLease: a leader whose renewals are answered in more
// than a renewal's budget keeps its term as long as the answers come
// before its lease ends. Each renewal round waits a budget (a tenth of the
// TTL), then the leader retries every quarter of a renewal interval; the
// answers to a round that ran out of budget still count (addLateRenewal).
// Five nodes with the local profile (a 2 s TTL: a 200 ms budget, retries
// every 167 ms) once a leader holds, then every message delayed by
// [lo, hi] each way for 30 s: the leader holds one term throughout.
func TestSlowLinksKeepTheLease(t *testing.T) {
	for _, lag := range [][2]time.Duration{
		{50 * time.Millisecond, 150 * time.Millisecond},
		{150 * time.Millisecond, 350 * time.Millisecond},
		{250 * time.Millisecond, 550 * time.Millisecond},
	} {
		for _, i := range scheduleIndices(cmp.Or(*schedules/100, 10)) {
			t.Run(fmt.Sprintf("%v-%v/%d", lag[0], lag[1], i), func(t *testing.T) {
				s := newCsim(t, testlog.Seed(t))
				s.addNodes(5)
				l, _ := s.waitLeader(15*time.Second, "n5")
				s.run(3 * time.Second)
				before := len(s.terms)
				s.lag = lag
				s.run(30 * time.Second)
				if got, terms := s.leader(), len(s.terms)-before; got != l || terms != 0 {
					t.Fatalf("with messages delayed %v-%v: %d new terms, now led by %q; want %s's term throughout\n%s",
						lag[0], lag[1], terms, got, l, s.dump())
				}
			})
		}
	}
}

// TestGrantsAcrossRoundsKeepTheLease: a leader whose renewals each get
// fewer grants than a majority, but from a majority over the last two
// rounds, keeps its term: each grant promised a TTL from after its
// request was sent, whichever round it answered (grantLog). Five voters;
// of each renewal round, only one follower's answer arrives, a different
// one each round (with the leader's own vote, 2 of the 3 needed). Counted
// by round, every renewal failed and the term ended within a TTL.
func TestGrantsAcrossRoundsKeepTheLease(t *testing.T) {
	for _, i := range scheduleIndices(cmp.Or(*schedules/100, 10)) {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			s := newCsim(t, testlog.Seed(t))
			s.addNodes(5)
			l, _ := s.waitLeader(15*time.Second, "n5")
			s.run(3 * time.Second)
			before := len(s.terms)
			others := s.othersThan(l)
			s.dropIf = func(f flight) bool {
				rep := f.env.LeaseReply
				if !f.reply || rep == nil || f.to != l || rep.Epoch != s.nodes[l].c.lease.epoch {
					return false
				}
				return f.from != others[rep.Seq%uint64(len(others))]
			}
			s.run(30 * time.Second)
			if got, terms := s.leader(), len(s.terms)-before; got != l || terms != 0 {
				t.Fatalf("with one follower's grant per renewal round: %d new terms, now led by %q; want %s's term throughout\n%s",
					terms, got, l, s.dump())
			}
		})
	}
}
