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

// TestStallsAreRecorded: a gap in the harness's clock longer than the
// threshold becomes a stall event that says how long; shorter gaps do not.
func TestStallsAreRecorded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	events, err := OpenEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now()
	var skew atomic.Int64 // added to the real clock
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	w := watchStalls(events, slog.New(slog.DiscardHandler), now)
	time.Sleep(5 * stallTick)
	skew.Store(int64(stallThreshold / 2)) // a short gap: not a stall
	time.Sleep(5 * stallTick)
	skew.Add(int64(9 * time.Second))
	time.Sleep(5 * stallTick)
	w.end()
	if err := events.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := check.ReadEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Kind != check.EventStall || !strings.Contains(got[0].Detail, "ran nothing for 9.") ||
		got[0].T < base.UnixNano() {
		t.Fatalf("events %+v, want one stall of about 9 s", got)
	}
}
