package supervise

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// MaxPartitions bounds a group's partitions: RunGroup holds one lock
// session, and so one socket connection, per partition it asks for.
const MaxPartitions = 32

// DefaultSettle is how long RunGroup waits after its partitions changed
// before it restarts the command with the new set.
const DefaultSettle = 500 * time.Millisecond

// GroupConfig configures RunGroup. Of the embedded Config, Socket,
// Command, Shell, Grace, Env, Stdout, Stderr, Logger, Dial and
// RestartDelay are used.
type GroupConfig struct {
	Config
	// Group names the group; its partitions are the named leases
	// GROUP/0 .. GROUP/Partitions-1.
	Group string
	// Partitions is the number of partitions, 1 to MaxPartitions; every
	// member of a group must use the same number.
	Partitions int
	// TTL is each partition's lease TTL; 0 asks for the agent's default.
	TTL time.Duration
	// Settle is how long a change of the partitions held waits before
	// the command is restarted; default DefaultSettle.
	Settle time.Duration
}

// groupEvent is what a partition's lock session tells RunGroup.
type groupEvent struct {
	part    int
	lock    *rpc.Lock // acquired
	lost    bool
	revoked bool
	done    chan struct{} // revoked: closed once the partition may be given back
}

// RunGroup makes this process a member of a partition group: it asks
// for every partition of the group, and runs the command with the
// partitions it holds in TENURE_PARTITIONS ("3:TOKEN,17:TOKEN": each
// partition and its fencing token) and the group in TENURE_GROUP. When the
// set changes the command is stopped (SIGTERM, then SIGKILL after the
// grace) and started again with the new set once it has settled; a
// partition the leader takes back is released only after the command that
// used it has stopped, and a partition whose lease gets within the grace
// of its end stops the command at once. With no partition held, no
// command runs. It returns when ctx ends, with exit code 0.
func RunGroup(ctx context.Context, cfg GroupConfig) (int, error) {
	c, err := cfg.Config.withLockDefaults()
	if err != nil {
		return ExitRefused, err
	}
	if cfg.Partitions < 1 || cfg.Partitions > MaxPartitions {
		return ExitRefused, fmt.Errorf("supervise: %d partitions: want 1 to %d", cfg.Partitions, MaxPartitions)
	}
	cfg.Config = c
	cfg.Settle = cmp.Or(cfg.Settle, DefaultSettle)
	cl, err := c.Dial(ctx, c.Socket)
	if err != nil {
		return ExitNoQuorum, fmt.Errorf("reach the agent: %w", err)
	}
	defer cl.Close()
	g := &groupRun{cfg: cfg, log: c.Logger.With("group", cfg.Group), held: map[int]*rpc.Lock{}, events: make(chan groupEvent)}
	memberCtx, stopMembers := context.WithCancel(ctx)
	done := make(chan struct{})
	for p := range cfg.Partitions {
		go func() {
			defer func() { done <- struct{}{} }()
			g.member(memberCtx, cl, p)
		}()
	}
	err = g.run(ctx)
	stopMembers()
	for range cfg.Partitions {
		<-done
	}
	return 0, err
}

// groupRun is RunGroup's state, owned by its run goroutine.
type groupRun struct {
	cfg     GroupConfig
	log     *slog.Logger
	events  chan groupEvent
	held    map[int]*rpc.Lock // partitions held, by number
	child   *child
	running []int     // the partitions the running child was given
	restart time.Time // when to (re)start the child; zero: no change pending
}

// member holds partition p's lock sessions, one after another.
func (g *groupRun) member(ctx context.Context, cl *rpc.Client, p int) {
	name := g.cfg.Group + "/" + strconv.Itoa(p)
	for ctx.Err() == nil {
		l, err := cl.LockWith(ctx, name, rpc.LockOptions{Wait: -1, TTL: g.cfg.TTL, Group: g.cfg.Group})
		if err != nil {
			if ctx.Err() == nil {
				g.log.Warn("cannot ask for a partition; retrying", "partition", p, "err", err)
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		if !g.send(ctx, groupEvent{part: p, lock: l}) {
			_ = l.Unlock(context.Background())
			return
		}
		select {
		case <-l.Lost():
			g.send(ctx, groupEvent{part: p, lost: true})
		case <-l.Revoked():
			ev := groupEvent{part: p, revoked: true, done: make(chan struct{})}
			if g.send(ctx, ev) {
				select {
				case <-ev.done:
				case <-ctx.Done():
				}
			}
		case <-ctx.Done():
		}
		uctx, cancel := context.WithTimeout(context.Background(), g.cfg.Grace)
		_ = l.Unlock(uctx)
		cancel()
	}
}

func (g *groupRun) send(ctx context.Context, ev groupEvent) bool {
	select {
	case g.events <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// run applies the members' events to the command until ctx ends.
func (g *groupRun) run(ctx context.Context) error {
	check := time.NewTicker(50 * time.Millisecond)
	defer check.Stop()
	delay := g.cfg.RestartDelay
	for {
		var exited <-chan struct{}
		if g.child != nil {
			exited = g.child.exited
		}
		select {
		case <-ctx.Done():
			g.stop("stopping")
			return nil
		case ev := <-g.events:
			g.apply(ev)
		case <-exited:
			g.child.finishOutput(g.cfg.Grace)
			g.log.Info("command exited; starting it again", append(g.child.exitAttrs(), "after", delay)...)
			g.child, g.running = nil, nil
			g.restart = time.Now().Add(delay)
			delay = min(2*delay, MaxRestartDelay)
		case <-check.C:
			for _, p := range g.running {
				if l := g.held[p]; l == nil || time.Until(l.Deadline()) <= g.cfg.Grace {
					g.stop(fmt.Sprintf("partition %d was not renewed in time", p))
					delete(g.held, p)
					g.restart = time.Now()
					break
				}
			}
			if !g.restart.IsZero() && !time.Now().Before(g.restart) {
				g.restart = time.Time{}
				if err := g.start(); err != nil {
					return err
				}
			}
		}
	}
}

// apply takes one member event.
func (g *groupRun) apply(ev groupEvent) {
	switch {
	case ev.lock != nil:
		g.held[ev.part] = ev.lock
		g.log.Info("partition acquired", "partition", ev.part, "token", ev.lock.Token())
	case ev.lost:
		delete(g.held, ev.part)
		if slices.Contains(g.running, ev.part) {
			g.stop(fmt.Sprintf("partition %d lost", ev.part))
		}
	case ev.revoked:
		g.log.Info("partition taken back by the leader", "partition", ev.part)
		if slices.Contains(g.running, ev.part) {
			g.stop(fmt.Sprintf("partition %d moves to another member", ev.part))
		}
		delete(g.held, ev.part)
		close(ev.done) // the command that used it is gone: give it back
	}
	g.restart = time.Now().Add(g.cfg.Settle)
}

// stop stops the running command, if any.
func (g *groupRun) stop(why string) {
	if g.child == nil {
		return
	}
	g.log.Info("stopping the command", "why", why, "partitions", g.running)
	g.child.stop(g.cfg.Grace)
	g.child, g.running = nil, nil
}

// start (re)starts the command with the partitions held now.
func (g *groupRun) start() error {
	parts := make([]int, 0, len(g.held))
	for p, l := range g.held {
		if time.Until(l.Deadline()) > g.cfg.Grace {
			parts = append(parts, p)
		}
	}
	sort.Ints(parts)
	if slices.Equal(parts, g.running) && g.child != nil {
		return nil
	}
	g.stop("the partitions changed")
	if len(parts) == 0 {
		return nil
	}
	var pairs []string
	for _, p := range parts {
		pairs = append(pairs, strconv.Itoa(p)+":"+strconv.FormatUint(g.held[p].Token(), 10))
	}
	env := slices.DeleteFunc(slices.Clone(g.cfg.Env), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == "TENURE_PARTITIONS" || name == "TENURE_GROUP"
	})
	env = append(env, "TENURE_GROUP="+g.cfg.Group, "TENURE_PARTITIONS="+strings.Join(pairs, ","))
	ch, err := startChildEnv(g.cfg.Config, term{}, env)
	if err != nil {
		return fmt.Errorf("start %q: %w", g.cfg.Command[0], err)
	}
	g.child, g.running = ch, parts
	g.log.Info("command started", "partitions", strings.Join(pairs, ","), "pid", ch.pid())
	return nil
}
