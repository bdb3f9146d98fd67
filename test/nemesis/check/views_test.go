package check

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func view(node, event, leader string, epoch uint64, at int) View {
	return View{T: ms(at), Node: node, Event: event, Leader: leader, Epoch: epoch}
}

// TestBlipsAreFollowersThatLostAContinuingTerm: a follower that says "no
// leader" and then names the same leader in the same term blipped (under
// a fault or not, and then how long after the last heal); one that then
// names another term, the leader itself, a follower whose agent
// restarted in between, and one that said "no leader" after the term had
// ended did not.
func TestBlipsAreFollowersThatLostAContinuingTerm(t *testing.T) {
	views := []View{
		view("h1", "leader-changed", "h5", 3, 0),
		view("h2", "leader-changed", "h5", 3, 0),
		view("h3", "leader-changed", "h5", 3, 0),
		view("h5", "became-leader", "h5", 3, 0),
		{T: ms(1000), Node: "h1", Event: "no-leader", Forgot: "h5: it campaigns"}, // a blip of 800 ms, no fault on
		view("h1", "leader-changed", "h5", 3, 1800),
		view("h2", "no-leader", "", 0, 2000), // then a new term: not a blip
		view("h2", "leader-changed", "h4", 4, 2500),
		view("h5", "no-leader", "", 0, 3000), // the leader itself
		view("h5", "became-leader", "h5", 3, 3100),
		view("h3", "no-leader", "", 0, 4000), // restarted before it found h5 again
		view("h3", "leader-changed", "h5", 3, 6000),
		view("h1", "no-leader", "", 0, 7100), // under a partition
		view("h1", "leader-changed", "h5", 3, 7300),
		{T: ms(8450), Node: "h2", Event: "no-leader", Forgot: "h4: no COORDINATOR from it for three announce intervals, nor when asked"},
		view("h2", "leader-changed", "h4", 4, 8500), // 450 ms after the heal
		view("h1", "leader-changed", "h6", 6, 8600),
		view("h1", "no-leader", "", 0, 9500),        // after h6's term ended: right
		view("h1", "leader-changed", "h6", 6, 9520), // a late announcement: stale, no blip
	}
	events := []Event{ev(EventStart, 5000, "h3"), ev(EventPartition, 7000), ev(EventHeal, 8000)}
	iv := []Interval{{Node: "h6", Epoch: 6, Start: ms(8500), End: ms(9000), Until: ms(9000)}}
	got := Blips(views, iv, events)
	want := []Blip{
		{At: ms(1000), Node: "h1", Leader: "h5", Epoch: 3, Gap: 800 * time.Millisecond, Why: "h5: it campaigns"},
		{At: ms(7100), Node: "h1", Leader: "h5", Epoch: 3, Gap: 200 * time.Millisecond, Faulted: true},
		{At: ms(8450), Node: "h2", Leader: "h4", Epoch: 4, Gap: 50 * time.Millisecond, AfterHeal: 450 * time.Millisecond,
			Why: "h4: no COORDINATOR from it for three announce intervals, nor when asked"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Blips =\n%v\nwant\n%v", got, want)
	}
	for i, want := range map[int]string{
		0: `h1 lost h5 (epoch 3) for 800ms: forgot "h5: it campaigns"`,
		1: `h1 lost h5 (epoch 3) for 200ms (under a fault)`,
		2: `h2 lost h4 (epoch 4) for 50ms, 450ms after a heal: forgot "h4: no COORDINATOR from it for three announce intervals, nor when asked"`,
	} {
		if s := got[i].String(); s != want {
			t.Fatalf("blip %d reads %q, want %q", i, s, want)
		}
	}
}

// TestLoadReadsWatchStreams: Load reads watch-<node>.jsonl as `tenure
// watch --json` writes it, keeping the leadership events (a member
// event's node is the member, not the file's), and a run without watch
// files loads too.
func TestLoadReadsWatchStreams(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("journal-h1.jsonl", `{"t":1700000000000000000,"node":"h1","event":"start","epoch":0,"until":0}`+"\n")
	write("events.jsonl", `{"t":1700000000000000000,"kind":"start","nodes":["h1"]}`+"\n")
	run, err := Load(dir)
	if err != nil || len(run.Views) != 0 {
		t.Fatalf("without watch files: %v views, %v", run, err)
	}
	write("watch-h1.jsonl", `{"time":"2026-12-05T05:00:00.5Z","event":"no-leader","leader":null,"epoch":0,"node":"h1","forgot":"h4: it resigned"}
{"time":"2026-12-05T05:00:01.25Z","event":"member-join","leader":{"node":"h5","id":5,"epoch":3},"epoch":0,"node":"h2","member":{"name":"h2"}}
{"time":"2026-12-05T05:00:01Z","event":"leader-changed","leader":{"node":"h5","id":5,"epoch":3},"epoch":3,"node":"h1"}
{"time":"2026-12-05T05:00:02Z","event":"no-lea`) // cut short by a kill
	run, err = Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) int64 { tm, _ := time.Parse(time.RFC3339Nano, s); return tm.UnixNano() }
	want := []View{
		{T: at("2026-12-05T05:00:00.5Z"), Node: "h1", Event: "no-leader", Forgot: "h4: it resigned"},
		{T: at("2026-12-05T05:00:01Z"), Node: "h1", Event: "leader-changed", Leader: "h5", Epoch: 3},
	}
	if !slices.Equal(run.Views, want) {
		t.Fatalf("views =\n%v\nwant\n%v", run.Views, want)
	}
}
