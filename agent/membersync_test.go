package agent

import (
	"testing"
	"time"
)

// A wave of gossip events rebuilds the membership once at its start and
// once per interval after, not once per event or per tick.
func TestMemberSyncCoalescesAWave(t *testing.T) {
	s := memberSync{interval: 50 * time.Millisecond}
	t0 := time.Unix(1000, 0)
	syncs := 0
	sync := func() { syncs++ }
	for i := range 100 {
		s.changed(t0.Add(time.Duration(i)*100*time.Microsecond), sync) // 100 events in 10 ms
	}
	if syncs != 1 {
		t.Fatalf("100 events within one tick: %d rebuilds, want 1 (the first)", syncs)
	}
	s.due(t0.Add(50*time.Millisecond), false, sync)
	if syncs != 2 {
		t.Fatalf("the tick after the wave: %d rebuilds, want 2", syncs)
	}
	s.changed(t0.Add(80*time.Millisecond), sync)
	if syncs != 2 {
		t.Fatalf("an event within a tick of the last rebuild: %d rebuilds, want it to wait", syncs)
	}
	if d, ok := s.wait(t0.Add(80 * time.Millisecond)); !ok || d != 20*time.Millisecond {
		t.Fatalf("wait = %v, %v; want 20ms, true (the interval after the rebuild at 50 ms)", d, ok)
	}
	s.due(t0.Add(90*time.Millisecond), false, sync)
	if syncs != 2 {
		t.Fatalf("a tick before the interval is over: %d rebuilds, want the event to wait", syncs)
	}
	s.due(t0.Add(100*time.Millisecond), false, sync)
	if syncs != 3 {
		t.Fatalf("the tick after a waiting event: %d rebuilds, want 3", syncs)
	}
	s.due(t0.Add(150*time.Millisecond), false, sync)
	if syncs != 3 {
		t.Fatalf("a tick with no event since: %d rebuilds, want 3", syncs)
	}
	if _, ok := s.wait(t0.Add(150 * time.Millisecond)); ok {
		t.Fatal("wait reports an event when none waits")
	}
	s.changed(t0.Add(260*time.Millisecond), sync)
	if syncs != 4 {
		t.Fatalf("an event after a quiet tick: %d rebuilds, want it synced at once", syncs)
	}
}

// An event waiting for its rebuild is synced at once when the election's
// timer is due, within the interval: the election must see the nodes
// gossip has revealed before it campaigns. With no event read, a rebuild
// older than urgentRefresh is redone as well: the events of a starved
// agent may wait unread while serf's member list already has them.
func TestMemberSyncSyncsAtOnceForTheElection(t *testing.T) {
	s := memberSync{interval: 250 * time.Millisecond}
	t0 := time.Unix(1000, 0)
	syncs := 0
	sync := func() { syncs++ }
	s.changed(t0, sync)
	s.changed(t0.Add(10*time.Millisecond), sync) // waits for the interval
	for _, step := range []struct {
		at     time.Duration
		urgent bool
		want   int
		what   string
	}{
		{20 * time.Millisecond, false, 1, "a tick within the interval: the event waits"},
		{30 * time.Millisecond, true, 2, "the election's timer is due: the waiting event is synced at once"},
		{40 * time.Millisecond, true, 2, "nothing read since a rebuild 10 ms ago: no rebuild"},
		{60 * time.Millisecond, false, 2, "a tick, nothing waits: no rebuild"},
		{90 * time.Millisecond, true, 3, "the election's timer is due 60 ms after the last rebuild: rebuilt from serf's list, events may wait unread"},
		{100 * time.Millisecond, true, 3, "due again 10 ms later: no rebuild"},
	} {
		if s.due(t0.Add(step.at), step.urgent, sync); syncs != step.want {
			t.Fatalf("%s: %d rebuilds, want %d", step.what, syncs, step.want)
		}
	}
}
