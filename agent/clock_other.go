//go:build !linux

package agent

// DefaultClock is the clock agents use when Config.Clock is nil: the system's
// monotonic clock (time spent suspended may not count on every system).
func DefaultClock() Clock { return SystemClock{} }
