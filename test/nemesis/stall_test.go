//go:build nemesis

package nemesis

import (
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/test/nemesis/check"
)

// watchThrough runs the stall watch on now through acts, five looks
// before and after each, and returns the events it recorded.
func watchThrough(t *testing.T, now clockReading, acts ...func()) []check.Event {
	t.Helper()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	events, err := OpenEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	w := watchStalls(events, slog.New(slog.DiscardHandler), now)
	time.Sleep(5 * stallTick)
	for _, act := range acts {
		act()
		time.Sleep(5 * stallTick)
	}
	w.end()
	if err := events.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := check.ReadEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestStallsAreRecorded: a gap in the harness's clock longer than the
// threshold becomes a stall event that says how long; shorter gaps do
// not, and neither is a step of the wall clock (both clocks moved).
func TestStallsAreRecorded(t *testing.T) {
	base := time.Now()
	var skew atomic.Int64 // added to the real clock
	now := func() (time.Time, int64) {
		t := time.Now().Add(time.Duration(skew.Load()))
		return t, t.UnixNano()
	}
	got := watchThrough(t, now,
		func() { skew.Store(int64(stallThreshold / 2)) }, // a short gap: not a stall
		func() { skew.Add(int64(9 * time.Second)) })
	if len(got) != 1 || got[0].Kind != check.EventStall || !strings.Contains(got[0].Detail, "ran nothing for 9.") ||
		got[0].T < base.UnixNano() {
		t.Fatalf("events %+v, want one stall of about 9 s", got)
	}
}

// TestClockStepsAreRecorded: the wall clock moving further than the
// monotonic one between two looks, either way, becomes a clock-step event
// that carries the step; a step below the threshold does not.
func TestClockStepsAreRecorded(t *testing.T) {
	var wallSkew atomic.Int64 // added to the wall clock only
	now := func() (time.Time, int64) {
		t := time.Now()
		return t, t.UnixNano() + wallSkew.Load()
	}
	got := watchThrough(t, now,
		func() { wallSkew.Store(int64(clockStepThreshold / 2)) }, // slewed: not a step
		func() { wallSkew.Add(int64(17 * time.Second)) },
		func() { wallSkew.Add(int64(-3 * time.Second)) })
	if len(got) != 2 || got[0].Kind != check.EventClockStep || got[1].Kind != check.EventClockStep {
		t.Fatalf("events %+v, want two clock steps", got)
	}
	for i, want := range []time.Duration{17 * time.Second, -3 * time.Second} {
		if d := time.Duration(got[i].Step) - want; d < -stallTick || d > stallTick {
			t.Errorf("step %d: %v, want about %v (%s)", i, time.Duration(got[i].Step), want, got[i].Detail)
		}
	}
}
