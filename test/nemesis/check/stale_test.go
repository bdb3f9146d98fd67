package check

import (
	"slices"
	"testing"
	"time"
)

func TestStaleViews(t *testing.T) {
	iv := beliefs([]JournalRecord{
		lead("h1", 1, 0, 1000), end("h1", 1, 800), // h1 resigns at 800
		lead("h2", 2, 850, 5000),
		lead("h3", 3, 6000, 9000),
	})
	views := []View{
		view("h3", "leader-changed", "h1", 1, 10),
		view("h3", "leader-changed", "h2", 2, 900), // learned of h2 100 ms after h1's end
		view("h4", "leader-changed", "h1", 1, 20),
		view("h4", "leader-changed", "h1", 1, 500),  // the same term again: one stretch
		view("h4", "leader-changed", "h2", 2, 2800), // 2 s naming h1 after its end
		view("h5", "leader-changed", "h2", 2, 30),
		view("h2", "became-leader", "h2", 2, 850),  // its own term: not a follower's view
		view("h5", "no-leader", "", 0, 5100),       // forgot h2 100 ms after its end
		view("h1", "leader-changed", "h2", 2, 900), // h1 names h2 until it is killed
		view("h6", "leader-changed", "h9", 9, 40),  // a term no journal shows
		view("h3", "became-leader", "h3", 3, 6000), // named h2 until it led itself
	}
	events := []Event{ev(EventKill, 7000, "h1"), ev(EventHeal, 100), {T: ms(4000), Kind: EventPartition}, ev(EventEnd, 9500)}
	r := newRun(nil, nil, events)
	slices.SortFunc(views, func(a, b View) int { return int(a.T - b.T) })
	got := StaleViews(views, iv, r.Events, ms(9500), 0)
	want := []Stale{
		{At: ms(800), Node: "h3", Leader: "h1", Epoch: 1, For: 100 * time.Millisecond},
		{At: ms(800), Node: "h4", Leader: "h1", Epoch: 1, For: 2 * time.Second},
		{At: ms(5000), Node: "h1", Leader: "h2", Epoch: 2, For: 2 * time.Second, Faulted: true},
		{At: ms(5000), Node: "h3", Leader: "h2", Epoch: 2, For: time.Second, Faulted: true},
		{At: ms(5000), Node: "h4", Leader: "h2", Epoch: 2, For: 4500 * time.Millisecond, Faulted: true},
		{At: ms(5000), Node: "h5", Leader: "h2", Epoch: 2, For: 100 * time.Millisecond, Faulted: true},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got\n%v\nwant\n%v", got, want)
	}
	if got := StaleViews(views, iv, r.Events, ms(9500), time.Second); len(got) != 4 {
		t.Fatalf("with a 1s minimum: %v", got)
	}
}
