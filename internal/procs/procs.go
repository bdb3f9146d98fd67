// Package procs sizes the Go scheduler of an agent's process: one P
// (GOMAXPROCS=1) while its socket is quiet, Go's default while
// applications ask it many questions a second.
//
// An agent's own work (gossip, elections, leases) is a few small tasks a
// second; with two or more Ps, each of them wakes a second thread that
// looks for work and goes back to sleep, and on a host whose cores are
// busy those wake-ups cost more than the work. Measured with 100 agents
// on two cores (docs/BENCHMARKS.md): about a fifth less CPU per agent
// while the fleet started, and agreement two seconds sooner. The socket is
// the one place where the agent's work is parallel: one P answers about a
// quarter fewer leader queries a second than two. So a Governor
// counts the socket's requests and gives the process Go's default number
// of Ps while they come faster than Config.Busy, and one P again after
// they have stayed below half that for Config.Cooldown.
package procs

import (
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Governor.
type Config struct {
	// Busy is the request rate, per second, from which the process runs
	// Go's default number of Ps; 0 means DefaultBusy.
	Busy float64
	// Cooldown is how long the rate must stay below half of Busy before the
	// process returns to one P; 0 means DefaultCooldown.
	Cooldown time.Duration
	// Logger receives a line for each change; nil discards them.
	Logger *slog.Logger
}

const (
	// DefaultBusy is the default Config.Busy: at about 20 µs of CPU a
	// query, an eighth of one P.
	DefaultBusy = 5000
	// DefaultCooldown is the default Config.Cooldown.
	DefaultCooldown = 30 * time.Second
	// batch is how many requests Note counts between two looks at the
	// clock: the rate is measured over batches, so a request costs an
	// atomic add.
	batch = 256
)

// Governor switches the process between one P and Go's default. Its
// methods may be called from any goroutine.
type Governor struct {
	cfg  Config
	reqs atomic.Uint64
	mark atomic.Int64 // time.Now().UnixNano() at the last full batch
	busy atomic.Bool

	mu      sync.Mutex
	stop    func() bool // stops the pending cooldown check
	checked uint64      // reqs at the last cooldown check
	stopped bool

	// The runtime, replaced by tests.
	now       func() time.Time
	afterFunc func(time.Duration, func()) (stop func() bool)
	oneP      func()
	defaultPs func()
}

// Start returns a Governor and puts the process on one P.
func Start(cfg Config) *Governor {
	g := newGovernor(cfg)
	g.oneP()
	g.cfg.Logger.Debug("procs: one P while the socket is quiet", "busy_per_second", g.cfg.Busy)
	return g
}

func newGovernor(cfg Config) *Governor {
	if cfg.Busy <= 0 {
		cfg.Busy = DefaultBusy
	}
	if cfg.Cooldown <= 0 {
		cfg.Cooldown = DefaultCooldown
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Governor{cfg: cfg, now: time.Now,
		afterFunc: func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop },
		oneP:      func() { runtime.GOMAXPROCS(1) },
		defaultPs: runtime.SetDefaultGOMAXPROCS}
	g.mark.Store(g.now().UnixNano())
	return g
}

// Note counts one request. Every batch requests it compares the time the
// batch took with the busy rate.
func (g *Governor) Note() {
	n := g.reqs.Add(1)
	if n%batch != 0 {
		return
	}
	now := g.now().UnixNano()
	prev := g.mark.Swap(now)
	if g.busy.Load() {
		return
	}
	if took := time.Duration(now - prev); took < time.Duration(batch/g.cfg.Busy*float64(time.Second)) {
		g.goBusy(took)
	}
}

// goBusy gives the process Go's default Ps and starts the cooldown checks.
func (g *Governor) goBusy(took time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped || g.busy.Load() {
		return
	}
	g.busy.Store(true)
	g.defaultPs()
	g.checked = g.reqs.Load()
	g.stop = g.afterFunc(g.cfg.Cooldown, g.check)
	g.cfg.Logger.Debug("procs: the socket is busy: Go's default Ps", "ps", runtime.GOMAXPROCS(0),
		"rate_per_second", int(batch/took.Seconds()))
}

// check ends a cooldown period: one P again if the requests of the period
// came slower than half the busy rate, another period otherwise.
func (g *Governor) check() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped || !g.busy.Load() {
		return
	}
	n := g.reqs.Load()
	rate := float64(n-g.checked) / g.cfg.Cooldown.Seconds()
	g.checked = n
	if rate >= g.cfg.Busy/2 {
		g.stop = g.afterFunc(g.cfg.Cooldown, g.check)
		return
	}
	g.busy.Store(false)
	g.mark.Store(g.now().UnixNano())
	g.oneP()
	g.cfg.Logger.Debug("procs: the socket is quiet again: one P", "rate_per_second", int(rate))
}

// Busy reports whether the process runs Go's default Ps now.
func (g *Governor) Busy() bool { return g.busy.Load() }

// Stop ends the cooldown checks; the process keeps the Ps it has.
func (g *Governor) Stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	if g.stop != nil {
		g.stop()
	}
}
