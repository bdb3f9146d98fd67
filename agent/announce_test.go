package agent

import (
	"testing"

	"github.com/tenurehq/tenure/bully"
)

// TestAnnouncementsSkipRepeatsInFlight: a leader's periodic COORDINATOR is
// not sent again to a member while the last one of the same term is still
// in flight to it; another member, or another term, goes at once; and the
// end of an older call does not forget a newer one.
func TestAnnouncementsSkipRepeatsInFlight(t *testing.T) {
	leader := bully.Node{ID: 9, Name: "n9"}
	coord := func(to string, term uint64) bully.Message {
		return bully.Message{Type: bully.MsgCoordinator, From: leader, To: bully.Node{Name: to}, Leader: leader, Term: term}
	}
	var s announcements

	finishA1, ok := s.start(coord("a", 1))
	if !ok {
		t.Fatal("the first announcement to a was refused")
	}
	if _, ok := s.start(coord("a", 1)); ok {
		t.Fatal("a repeat to a went out while the first was in flight")
	}
	finishB1, ok := s.start(coord("b", 1))
	if !ok {
		t.Fatal("the announcement to b waited for a's")
	}
	finishA2, ok := s.start(coord("a", 2))
	if !ok {
		t.Fatal("a new term's announcement to a waited for the old term's")
	}
	finishA1() // the old term's call ends: the new one is still in flight
	if _, ok := s.start(coord("a", 2)); ok {
		t.Fatal("the end of term 1's call let a repeat of term 2 go")
	}
	finishA2()
	if _, ok := s.start(coord("a", 2)); !ok {
		t.Fatal("an announcement to a was refused after the last one ended")
	}
	finishB1()
	if _, ok := s.start(coord("b", 1)); !ok {
		t.Fatal("an announcement to b was refused after the last one ended")
	}
}
