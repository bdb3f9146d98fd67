package agent

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestBootClockReadsBoottime: the raw read returns CLOCK_BOOTTIME, between
// two reads of it through the ordinary call.
func TestBootClockReadsBoottime(t *testing.T) {
	read := func() time.Time {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
			t.Fatal(err)
		}
		return time.Unix(0, ts.Nano())
	}
	for range 100 {
		before := read()
		got := bootClock{}.Now()
		after := read()
		if got.Before(before) || got.After(after) {
			t.Fatalf("bootClock read %v, not between CLOCK_BOOTTIME readings %v and %v", got, before, after)
		}
	}
}
