package agent

import (
	"time"

	"golang.org/x/sys/unix"
)

// DefaultClock is the clock agents use when Config.Clock is nil. On Linux it
// reads CLOCK_BOOTTIME, which keeps counting while the machine is suspended,
// so a leader that was suspended wakes to find its lease over (as the
// voters' clocks say), instead of resuming with the time it slept still on
// its lease.
func DefaultClock() Clock { return bootClock{} }

// bootClock reads CLOCK_BOOTTIME. Its instants carry no wall-clock meaning:
// they are only compared with each other.
type bootClock struct{}

// Now returns the time since boot as an instant.
func (bootClock) Now() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Now() // not expected on Linux; the monotonic clock is next best
	}
	return time.Unix(0, ts.Nano())
}
