package agent

import (
	"time"
	"unsafe"

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
//
// The read is a raw system call: clock_gettime never blocks, and a plain
// one (unix.ClockGettime) tells Go's scheduler it may block, which wakes the
// runtime's monitor thread from its sleep and sets it polling every 20 µs
// for a while. The agent reads the clock on most of its wake-ups; with many
// agents on one host those monitor wake-ups were a quarter of their CPU.
// Go reads only CLOCK_MONOTONIC and CLOCK_REALTIME through the vDSO.
func (bootClock) Now() time.Time {
	var ts unix.Timespec
	_, _, errno := unix.RawSyscall(unix.SYS_CLOCK_GETTIME, unix.CLOCK_BOOTTIME, uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		return time.Now() // not expected on Linux; the monotonic clock is next best
	}
	return time.Unix(0, ts.Nano())
}
