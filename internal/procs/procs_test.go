package procs

import (
	"testing"
	"time"
)

// fakeRuntime replaces a Governor's clock, timer and GOMAXPROCS.
type fakeRuntime struct {
	now     time.Time
	ps      int
	pending func() // the cooldown check waiting to fire
}

func newFake(t *testing.T, cfg Config) (*Governor, *fakeRuntime) {
	t.Helper()
	f := &fakeRuntime{now: time.Unix(1000, 0), ps: 2}
	g := newGovernor(cfg)
	g.now = func() time.Time { return f.now }
	g.mark.Store(f.now.UnixNano())
	g.afterFunc = func(d time.Duration, fn func()) func() bool {
		if d != g.cfg.Cooldown {
			t.Errorf("cooldown check in %v, want %v", d, g.cfg.Cooldown)
		}
		f.pending = fn
		return func() bool { f.pending = nil; return true }
	}
	g.oneP = func() { f.ps = 1 }
	g.defaultPs = func() { f.ps = 2 }
	g.oneP()
	return g, f
}

// requests notes n requests spread evenly over d.
func (f *fakeRuntime) requests(g *Governor, n int, d time.Duration) {
	for i := 0; i < n; i++ {
		f.now = f.now.Add(d / time.Duration(n))
		g.Note()
	}
}

// fire runs the pending cooldown check, as its timer would.
func (f *fakeRuntime) fire(t *testing.T, d time.Duration) {
	t.Helper()
	if f.pending == nil {
		t.Fatal("no cooldown check is pending")
	}
	fn := f.pending
	f.pending = nil
	f.now = f.now.Add(d)
	fn()
}

func TestQuietSocketKeepsOneP(t *testing.T) {
	g, f := newFake(t, Config{Busy: 5000})
	f.requests(g, 10*batch, 10*time.Second) // 256 a second
	if f.ps != 1 || g.Busy() {
		t.Fatalf("%d Ps (busy %v) after 256 requests a second, want 1", f.ps, g.Busy())
	}
	if f.pending != nil {
		t.Fatal("a cooldown check is pending while quiet: a quiet agent should set no timer")
	}
}

func TestBusySocketGetsDefaultPsUntilItCools(t *testing.T) {
	cool := 30 * time.Second
	g, f := newFake(t, Config{Busy: 5000, Cooldown: cool})
	f.requests(g, batch, 20*time.Millisecond) // 12,800 a second
	if f.ps != 2 || !g.Busy() {
		t.Fatalf("%d Ps (busy %v) after 12,800 requests a second, want Go's default", f.ps, g.Busy())
	}
	// Still 3,000 a second (above half the busy rate): stays.
	f.requests(g, 3000*30, 0)
	f.fire(t, cool)
	if f.ps != 2 {
		t.Fatalf("back to %d P while still answering 3,000 requests a second", f.ps)
	}
	// 1,000 a second over the next period: one P again, no timer left.
	f.requests(g, 1000*30, 0)
	f.fire(t, cool)
	if f.ps != 1 || g.Busy() {
		t.Fatalf("%d Ps (busy %v) after a period at 1,000 requests a second, want 1", f.ps, g.Busy())
	}
	if f.pending != nil {
		t.Fatal("a cooldown check is still pending after returning to one P")
	}
	// And busy again when the load comes back.
	f.requests(g, 2*batch, 40*time.Millisecond)
	if f.ps != 2 {
		t.Fatalf("%d Ps when the load came back, want Go's default", f.ps)
	}
}

func TestStopEndsTheChecks(t *testing.T) {
	g, f := newFake(t, Config{})
	f.requests(g, batch, time.Millisecond)
	if !g.Busy() {
		t.Fatal("not busy after 256 requests in a millisecond")
	}
	g.Stop()
	if f.pending != nil {
		t.Fatal("the cooldown check is still pending after Stop")
	}
}
