package agent

import "time"

// Clock is the agent's source of time. Instants it returns must carry a
// monotonic reading (as time.Now's do), since all deadlines are compared as
// durations on this node's own clock, never as wall-clock times.
type Clock interface {
	Now() time.Time
}

// SystemClock reads Go's monotonic clock through time.Now. On Linux that
// clock stops while the machine is suspended; DefaultClock does not.
type SystemClock struct{}

// Now returns the current instant.
func (SystemClock) Now() time.Time { return time.Now() }
