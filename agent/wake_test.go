package agent

import (
	"testing"
	"time"
)

// TestWaitingNodeTicksSlowly: a node that follows no leader yet and waits
// for its first campaign has nothing to do until its reach probe is near,
// so its core is quiet and the driver ticks it at the idle rate. It still
// probes and wins as soon as a node ticked every step does. While a fleet
// starts, every node but the highest waits like this for seconds; ticked
// every 50 ms, a hundred of them on one host woke about 20 times a second
// each, for nothing.
func TestWaitingNodeTicksSlowly(t *testing.T) {
	const step = 10 * time.Millisecond
	idle := localIdleTick
	// lead runs a rig until its core holds the lease, ticking it every
	// step, or as the driver does (driverTicks); it returns how long that
	// took and how often it ticked.
	lead := func(driver bool) (took time.Duration, ticks int) {
		r := newRig(t, 3)
		begin := r.now
		var dt driverTicks
		for end := r.now.Add(5 * time.Second); r.now.Before(end); {
			r.now = r.now.Add(step)
			if driver && !dt.due(r.now, r.now, r.c) {
				continue
			}
			r.c.tick(r.now)
			r.deliver()
			ticks++
			if r.c.leaseValid(r.now) {
				return r.now.Sub(begin), ticks
			}
		}
		t.Fatalf("no lease after 5 s (driver ticking %v)", driver)
		return 0, 0
	}
	r := newRig(t, 3)
	campaign := r.c.m.Deadline().Sub(r.now)
	window := r.c.cfg.Lease.AcquireBudget + r.c.cfg.Election.RankDelay
	if st := r.c.m.Status(); !st.Leader.IsZero() {
		t.Fatalf("the rig's node follows %v: the test needs it waiting", st.Leader)
	}
	if !r.c.quiet(r.now, idle) {
		t.Fatalf("a node waiting %v for its first campaign is not quiet", campaign)
	}
	every, everyTicks := lead(false)
	slow, slowTicks := lead(true)
	if slow > every+step {
		t.Errorf("ticked as the driver does, it led after %v; ticked every step, after %v", slow, every)
	}
	// Before its probe window opens it is ticked about once per idle
	// tick; after, every step.
	quietFor := campaign - window - idle
	if want := int(quietFor/idle) + 1 + int((every-quietFor)/step) + 1; slowTicks > want {
		t.Errorf("ticked %d times before it led (every step: %d), want at most %d", slowTicks, everyTicks, want)
	}
}
