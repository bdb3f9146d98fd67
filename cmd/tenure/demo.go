package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tenurehq/tenure/agent"
	"github.com/tenurehq/tenure/examples/fenced-store/store"
)

// Demo constants.
const (
	// minDemoNodes is the smallest cluster that still has a majority of
	// voters once its leader is frozen.
	minDemoNodes = 3
	// maxDemoTTL keeps the demo short: it waits out a whole lease.
	maxDemoTTL = 10 * time.Second
	// demoKey is the store key every write of the demo goes to.
	demoKey = "primary"
	// demoCallTimeout bounds each request to the store.
	demoCallTimeout = 5 * time.Second
	// demoStopTimeout bounds the agents' goodbyes and the HTTP server's
	// shutdown at the end of the demo.
	demoStopTimeout = 5 * time.Second
	// demoPoll is how often the demo looks at the agents while it waits.
	demoPoll = 20 * time.Millisecond
	// maxSocketPath is the longest Unix socket path that works on every
	// platform tenure builds for (macOS allows 104 bytes, Linux 108).
	maxSocketPath = 103
	// demoLesson is the moral of the story.
	demoLesson = "the resource enforced the lock: a token check at the store stops a leader that woke up after its lease ended"
)

// demoCommand is `tenure demo`: a thin wrapper around runDemo.
func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "run agents and a fenced store in this process and watch a paused leader's stale write get refused",
		Description: "Starts --nodes agents on 127.0.0.1 and a fenced key-value store, elects a leader, freezes it\n" +
			"past the end of its lease, elects the next one, and shows the store refusing the old\n" +
			"leader's write once it wakes up. Everything runs in temporary directories removed at the end.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "nodes", Value: minDemoNodes, Usage: "number of agents (at least 3)"},
			&cli.DurationFlag{Name: "lease-ttl", Value: 2 * time.Second, Usage: "the agents' lease TTL, at most 10s; the demo waits out one lease"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per step instead of prose"},
			&cli.BoolFlag{Name: "verbose", Usage: "print the agents' and the store's logs on stderr"},
			&cli.BoolFlag{Name: "compare", Usage: "tell the story against Redlock, a single Redis instance and a tenure lock, with real redis-server processes: a holder paused past its TTL writes late"},
		},
		Action: runDemoCommand,
	}
}

// runDemoCommand runs the demo until it ends or SIGINT/SIGTERM arrives:
// exit 2 for bad options, 1 when a step fails, 130 when interrupted.
func runDemoCommand(c *cli.Context) error {
	opts := demoOptions{Nodes: c.Int("nodes"), LeaseTTL: c.Duration("lease-ttl"), JSON: c.Bool("json")}
	if c.Bool("verbose") {
		opts.Logs = c.App.ErrWriter
	}
	if err := opts.validate(); err != nil {
		return fail(2, "tenure demo: %v", err)
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop) // a second signal kills at once
	run := runDemo
	if c.Bool("compare") {
		run = runCompare
	}
	err := run(ctx, c.App.Writer, opts)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && c.Context.Err() == nil:
		return fail(130, "tenure demo: interrupted; agents and store stopped (%v)", err)
	default:
		return fail(1, "tenure demo: %v", err)
	}
}

// demoOptions configures runDemo.
type demoOptions struct {
	// Nodes is how many agents to start, at least 3.
	Nodes int
	// LeaseTTL is the agents' lease TTL.
	LeaseTTL time.Duration
	// JSON prints one JSON object per step instead of prose.
	JSON bool
	// Logs receives the agents' and the store's logs; nil discards them.
	Logs io.Writer
}

// validate reports options the demo cannot run with, checking the lease
// TTL against the agent configuration the demo will use.
func (o demoOptions) validate() error {
	if o.Nodes < minDemoNodes {
		return fmt.Errorf("--nodes %d: the demo needs at least %d agents, so that a majority of voters remains to elect a new leader while the old one is frozen",
			o.Nodes, minDemoNodes)
	}
	if o.LeaseTTL > maxDemoTTL {
		return fmt.Errorf("--lease-ttl %v: the demo waits out a whole lease, so keep it at most %v (the default is 2s)", o.LeaseTTL, maxDemoTTL)
	}
	cfg := demoAgentConfig(os.TempDir(), o.Nodes, o.Nodes, o.LeaseTTL, nil)
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("--lease-ttl %v does not suit the demo's agents (local timing profile; the default, 2s, does): %w", o.LeaseTTL, err)
	}
	return nil
}

// demoAgentConfig is the configuration of agent i (named n<i>, ID i) of an
// n-agent demo cluster whose files live in dir: the defaults of a real
// agent, with the local timing profile and the demo's short lease.
func demoAgentConfig(dir string, i, n int, ttl time.Duration, logger *slog.Logger) agent.Config {
	cfg := agent.DefaultConfig()
	cfg.Name, cfg.ID = fmt.Sprintf("n%d", i), uint64(i)
	cfg.BindAddr, cfg.PeerBindAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.SocketPath = filepath.Join(dir, cfg.Name+".sock")
	cfg.DataDir = filepath.Join(dir, cfg.Name)
	cfg.Profile = agent.Local
	cfg.Consistency = agent.Quorum
	cfg.LeaseTTL = ttl
	cfg.Expect = n
	cfg.Logger = logger
	cfg.Version = version
	return cfg
}

// demo is one run of the demo: what it started, and what it saw.
type demo struct {
	opts   demoOptions
	out    *narrator
	logger *slog.Logger
	dir    string

	agents []*agent.Agent
	store  *store.Store
	server *http.Server
	served chan error // Serve's result
	url    string

	resume func() // wakes the frozen old leader; nil when none is frozen

	// What the demo saw, for the summary.
	first, second demoLeader
	staleMessage  string
	storedValue   string
	storedToken   uint64
	leaseEndedMS  int64 // from the freeze to the old lease's end
}

// demoLeader is a leader all running agents agree on.
type demoLeader struct {
	agent *agent.Agent
	name  string
	epoch uint64
}

// runDemo tells the fencing story on w, running opts.Nodes agents and a
// fenced store in this process, and stops and removes everything before it
// returns, whether the story completed or not. ctx interrupts it.
func runDemo(ctx context.Context, w io.Writer, opts demoOptions) (err error) {
	if err := opts.validate(); err != nil {
		return err
	}
	d := &demo{opts: opts, out: &narrator{w: w, json: opts.JSON, start: time.Now()}, logger: slog.New(slog.DiscardHandler)}
	if opts.Logs != nil {
		d.logger = slog.New(slog.NewTextHandler(opts.Logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	defer func() { err = errors.Join(err, d.cleanup(err == nil)) }()
	steps := []func(context.Context) error{
		d.setup, d.elect,
		func(ctx context.Context) error { return d.write(ctx, "leader_write", d.first) },
		d.freeze, d.leaseEnds, d.reelect,
		func(ctx context.Context) error { return d.write(ctx, "new_leader_write", d.second) },
		d.staleWrite, d.readBack,
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	d.summary()
	return d.out.err
}

// setup creates the temporary directory and starts the agents and the store.
func (d *demo) setup(context.Context) error {
	dir, err := shortTempDir(d.opts.Nodes)
	if err != nil {
		return err
	}
	d.dir = dir
	if err := d.startAgents(); err != nil {
		return err
	}
	if err := d.startStore(store.OneFence); err != nil {
		return err
	}
	d.out.step("start", map[string]any{"dir": d.dir, "nodes": d.opts.Nodes, "lease_ttl_ms": d.opts.LeaseTTL.Milliseconds(),
		"consistency": "quorum", "store": d.url},
		"started %d agents n1..n%d on 127.0.0.1 (quorum mode, lease TTL %v) and a fenced store at %s; files in %s",
		d.opts.Nodes, d.opts.Nodes, d.opts.LeaseTTL, d.url, d.dir)
	return nil
}

// shortTempDir makes a temporary directory whose socket paths fit the Unix
// limit, in $TMPDIR if its path is short enough, else in /tmp.
func shortTempDir(nodes int) (string, error) {
	sock := fmt.Sprintf("n%d.sock", nodes)
	var errs []error
	for _, parent := range []string{os.TempDir(), "/tmp"} {
		dir, err := os.MkdirTemp(parent, "tenure-demo-")
		if err == nil && len(filepath.Join(dir, sock)) <= maxSocketPath {
			return dir, nil
		} else if err == nil {
			os.RemoveAll(dir)
			err = fmt.Errorf("%s: too long for a Unix socket path", dir)
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("create a temporary directory: %w", errors.Join(errs...))
}

// startAgents starts n1..nN, each joining n1, bootstrapping a roster of all.
func (d *demo) startAgents() error {
	seed := ""
	for i := 1; i <= d.opts.Nodes; i++ {
		cfg := demoAgentConfig(d.dir, i, d.opts.Nodes, d.opts.LeaseTTL, d.logger)
		if seed != "" {
			cfg.Join = []string{seed}
		}
		a, err := agent.Start(cfg)
		if err != nil {
			return fmt.Errorf("start agent %s: %w", cfg.Name, err)
		}
		d.agents = append(d.agents, a)
		if seed == "" {
			seed = a.GossipAddr()
		}
	}
	return nil
}

// startStore opens the fenced store, with its fences kept as mode says
// (one for the whole store, or one per key), and serves it on a free
// loopback port.
func (d *demo) startStore(mode store.FenceMode) error {
	st, err := store.Open(filepath.Join(d.dir, "store"), mode, d.logger.With("component", "store"))
	if err != nil {
		return fmt.Errorf("open the fenced store: %w", err)
	}
	d.store = st
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for the fenced store: %w", err)
	}
	d.url = "http://" + ln.Addr().String()
	d.server = &http.Server{Handler: st.Handler(), ReadHeaderTimeout: demoCallTimeout}
	d.served = make(chan error, 1)
	go func() { d.served <- d.server.Serve(ln) }()
	return nil
}

// elect waits until every agent agrees on one leader and epoch.
func (d *demo) elect(ctx context.Context) error {
	timeout := 10*time.Second + 2*d.opts.LeaseTTL
	l, err := waitLeader(ctx, "the first election", timeout, d.agents, 0)
	if err != nil {
		return err
	}
	d.first = l
	d.out.step("elected", map[string]any{"leader": l.name, "leader_id": l.agent.ID(), "epoch": l.epoch},
		"election: %s leads with epoch %d (all %d agents agree; a majority of voters granted its lease)",
		l.name, l.epoch, len(d.agents))
	return nil
}

// write has leader l write at demoKey with its epoch as the fencing token,
// and reports it as step.
func (d *demo) write(ctx context.Context, step string, l demoLeader) error {
	value := fmt.Sprintf("written by %s in term %d", l.name, l.epoch)
	if err := d.put(ctx, l.epoch, value); err != nil {
		return fmt.Errorf("%s's write with token %d: %w", l.name, l.epoch, err)
	}
	d.out.step(step, map[string]any{"writer": l.name, "token": l.epoch, "key": demoKey, "value": value, "accepted": true},
		"%s writes %q to key %q with fencing token %d: accepted", l.name, value, demoKey, l.epoch)
	return nil
}

// put writes value at demoKey with token, bounded by demoCallTimeout.
func (d *demo) put(ctx context.Context, token uint64, value string) error {
	ctx, cancel := context.WithTimeout(ctx, demoCallTimeout)
	defer cancel()
	return store.Put(ctx, d.url, demoKey, token, []byte(value))
}

// freeze freezes the first leader, the way a long GC pause would.
func (d *demo) freeze(context.Context) error {
	l := d.first
	d.resume = l.agent.Freeze()
	st := l.agent.Status()
	left := time.Duration(st.LeaseRemainingMS) * time.Millisecond
	d.out.step("freeze", map[string]any{"node": l.name, "token": l.epoch, "lease_remaining_ms": st.LeaseRemainingMS},
		"%s freezes, as in a long GC pause: no renewals, no answers to peers; the process keeps token %d in memory "+
			"(its lease has %v left on its own clock)", l.name, l.epoch, left.Round(time.Millisecond))
	return nil
}

// leaseEnds waits until the frozen leader's own agent says it no longer leads.
func (d *demo) leaseEnds(ctx context.Context) error {
	l, start := d.first, time.Now()
	err := poll(ctx, l.name+"'s lease to end", d.opts.LeaseTTL+2*time.Second, func() (bool, string) {
		st := l.agent.Status()
		return !st.IsLeader, fmt.Sprintf("%s is_leader=%v, lease_remaining_ms=%d", l.name, st.IsLeader, st.LeaseRemainingMS)
	})
	if err != nil {
		return err
	}
	d.leaseEndedMS = time.Since(start).Milliseconds()
	d.out.step("lease_expired", map[string]any{"node": l.name, "token": l.epoch, "after_freeze_ms": d.leaseEndedMS},
		"%s's lease deadline passes on its own clock: its agent now reports is_leader=false, but the frozen process is not asking",
		l.name)
	return nil
}

// reelect waits until the other agents agree on a leader with a higher epoch.
func (d *demo) reelect(ctx context.Context) error {
	var others []*agent.Agent
	for _, a := range d.agents {
		if a != d.first.agent {
			others = append(others, a)
		}
	}
	old := d.first
	l, err := waitLeader(ctx, "a new leader", 2*d.opts.LeaseTTL+5*time.Second, others, old.epoch)
	if err != nil {
		return err
	}
	d.second = l
	d.out.step("new_leader", map[string]any{"leader": l.name, "leader_id": l.agent.ID(), "epoch": l.epoch, "previous_epoch": old.epoch},
		"%s is elected with epoch %d (the %d running agents agree) once the voters' promises to %s had expired",
		l.name, l.epoch, len(others), old.name)
	return nil
}

// staleWrite wakes the old leader and has it write with its old epoch, as
// a paused process that never re-checked its leadership would.
func (d *demo) staleWrite(ctx context.Context) error {
	old := d.first
	d.resume()
	d.resume = nil
	isLeader := old.agent.Status().IsLeader
	value := fmt.Sprintf("written by %s in term %d, after waking up", old.name, old.epoch)
	err := d.put(ctx, old.epoch, value)
	if err == nil {
		return fmt.Errorf("the store ACCEPTED %s's write with stale token %d after accepting %d: fencing is broken",
			old.name, old.epoch, d.second.epoch)
	}
	if !errors.Is(err, store.ErrStale) {
		return fmt.Errorf("%s's stale write: want 409 from the store, got: %w", old.name, err)
	}
	d.staleMessage = strings.TrimPrefix(err.Error(), store.ErrStale.Error()+": ")
	d.out.step("stale_write", map[string]any{"writer": old.name, "token": old.epoch, "writer_agent_is_leader": isLeader,
		"rejected": true, "status": http.StatusConflict, "store_message": d.staleMessage},
		"%s wakes up and, without re-checking (its agent would say is_leader=%v), writes with its old token %d: "+
			"REJECTED by the store, 409 Conflict: %q", old.name, isLeader, old.epoch, d.staleMessage)
	return nil
}

// readBack reads the key to show which write the store kept.
func (d *demo) readBack(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, demoCallTimeout)
	defer cancel()
	value, token, err := store.Get(ctx, d.url, demoKey)
	if err != nil {
		return fmt.Errorf("read back %q: %w", demoKey, err)
	}
	d.storedValue, d.storedToken = string(value), token
	d.out.step("read_back", map[string]any{"key": demoKey, "value": string(value), "token": token},
		"the store holds %q at %q, stored with token %d", value, demoKey, token)
	return nil
}

// summary prints what happened and what it shows.
func (d *demo) summary() {
	fields := map[string]any{
		"first_leader": d.first.name, "first_epoch": d.first.epoch,
		"second_leader": d.second.name, "second_epoch": d.second.epoch,
		"first_write_accepted": true, "new_write_accepted": true, "stale_write_rejected": true,
		"stale_message": d.staleMessage, "stored_value": d.storedValue, "stored_token": d.storedToken,
		"lease_ended_after_freeze_ms": d.leaseEndedMS, "lesson": demoLesson,
	}
	lines := []string{
		fmt.Sprintf("first term: %s led with epoch %d; its write with token %d was ACCEPTED", d.first.name, d.first.epoch, d.first.epoch),
		fmt.Sprintf("%s froze; its lease ended on its own clock %v later", d.first.name, time.Duration(d.leaseEndedMS)*time.Millisecond),
		fmt.Sprintf("next term: %s led with epoch %d; its write with token %d was ACCEPTED", d.second.name, d.second.epoch, d.second.epoch),
		fmt.Sprintf("%s woke and wrote with its old token %d: REJECTED (409: %s)", d.first.name, d.first.epoch, d.staleMessage),
		fmt.Sprintf("the store kept %q (token %d)", d.storedValue, d.storedToken),
		"lesson: " + demoLesson,
	}
	pad := strings.Repeat(" ", len("[ 0.000s] ")) // under the narrated text
	d.out.step("summary", fields, "summary\n%s%s", pad, strings.Join(lines, "\n"+pad))
}

// cleanup wakes a frozen agent and stops and removes everything setup
// started, bounding the goodbyes with demoStopTimeout. After a completed
// story it says so in prose mode.
func (d *demo) cleanup(completed bool) error {
	if d.resume != nil {
		d.resume()
	}
	errs := []error{d.stopAgents(), d.stopStore()}
	if d.dir != "" {
		errs = append(errs, os.RemoveAll(d.dir))
	}
	err := errors.Join(errs...)
	if err != nil {
		return fmt.Errorf("clean up: %w", err)
	}
	if completed && !d.opts.JSON {
		d.out.line("stopped %d agents and the store; removed %s", len(d.agents), d.dir)
	}
	return nil
}

// stopAgents shuts the agents down one by one (all at once, a leave may find
// no live peer to carry it and wait out serf's broadcast timeout). Their
// goodbyes share demoStopTimeout; the stops always complete.
func (d *demo) stopAgents() error {
	ctx, cancel := context.WithTimeout(context.Background(), demoStopTimeout)
	defer cancel()
	var errs []error
	for _, a := range d.agents {
		if err := a.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop agent %s: %w", a.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// stopStore shuts the HTTP server down, then closes the store and the
// client's idle connections, so no goroutine outlives the demo.
//
// The client's idle connections are closed first too: a request cancelled
// by an interrupt can leave behind a connection on which no request was
// ever sent, and Shutdown waits up to 5s before treating those as idle.
func (d *demo) stopStore() error {
	var errs []error
	if d.server != nil {
		http.DefaultClient.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), demoStopTimeout)
		defer cancel()
		if err := d.server.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop the store's HTTP server: %w", err))
			d.server.Close()
		}
		if err := <-d.served; !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("store's HTTP server: %w", err))
		}
		http.DefaultClient.CloseIdleConnections()
	}
	if d.store != nil {
		errs = append(errs, d.store.Close())
	}
	return errors.Join(errs...)
}

// waitLeader waits up to timeout until every agent in as reports the same
// leader with the same epoch, above minEpoch, and that leader's own agent
// says it holds a valid lease.
func waitLeader(ctx context.Context, what string, timeout time.Duration, as []*agent.Agent, minEpoch uint64) (demoLeader, error) {
	var l demoLeader
	err := poll(ctx, what, timeout, func() (bool, string) {
		var why string
		l, why = agreedLeader(as)
		if why == "" && l.epoch <= minEpoch {
			why = fmt.Sprintf("%s leads with epoch %d, not above %d yet", l.name, l.epoch, minEpoch)
		}
		return why == "", why
	})
	return l, err
}

// agreedLeader returns the leader every agent in as agrees on, or why there
// is none yet.
func agreedLeader(as []*agent.Agent) (demoLeader, string) {
	var l demoLeader
	for _, a := range as {
		st := a.Status()
		switch {
		case st.Leader == nil:
			return l, fmt.Sprintf("%s knows no leader (%s)", a.Name(), st.Reason)
		case l.name != "" && (st.Leader.Node != l.name || st.Leader.Epoch != l.epoch):
			return l, fmt.Sprintf("%s sees %s at epoch %d, %s sees %s at epoch %d",
				as[0].Name(), l.name, l.epoch, a.Name(), st.Leader.Node, st.Leader.Epoch)
		}
		l.name, l.epoch = st.Leader.Node, st.Leader.Epoch
		if a.Name() == l.name {
			l.agent = a
		}
	}
	if l.agent == nil {
		return l, fmt.Sprintf("the leader %s is not among the agents asked", l.name)
	}
	if !l.agent.Status().IsLeader {
		return l, fmt.Sprintf("%s does not hold a valid lease yet", l.name)
	}
	return l, ""
}

// poll calls cond every demoPoll until it reports done, ctx ends, or
// timeout passes; the error then names what did not happen and the last
// state cond described.
func poll(ctx context.Context, what string, timeout time.Duration, cond func() (done bool, state string)) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(demoPoll)
	defer tick.Stop()
	for {
		done, state := cond()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted while waiting for %s: %w", what, context.Cause(ctx))
		case <-deadline.C:
			return fmt.Errorf("waited %v for %s in vain; last seen: %s", timeout, what, state)
		case <-tick.C:
		}
	}
}

// narrator prints the demo's steps, as prose lines prefixed with the
// elapsed time or as one JSON object per step. It keeps the first write
// error.
type narrator struct {
	w     io.Writer
	json  bool
	start time.Time
	err   error
}

// step reports one step: in JSON mode as {"step": name, "elapsed_ms": …,
// fields…}, else as the formatted prose.
func (n *narrator) step(name string, fields map[string]any, format string, args ...any) {
	if !n.json {
		n.line(format, args...)
		return
	}
	n.keep(writeStepJSON(n.w, name, time.Since(n.start).Milliseconds(), fields))
}

// writeStepJSON writes one JSON line with "step" and "elapsed_ms" first,
// then fields in key order.
func writeStepJSON(w io.Writer, name string, elapsedMS int64, fields map[string]any) error {
	head, _ := json.Marshal(struct {
		Step      string `json:"step"`
		ElapsedMS int64  `json:"elapsed_ms"`
	}{name, elapsedMS})
	rest, err := json.Marshal(fields) // keys sorted
	if err != nil {
		return fmt.Errorf("encode step %s: %w", name, err)
	}
	if len(rest) > 2 { // not {}
		head = append(append(head[:len(head)-1], ','), rest[1:]...)
	}
	_, err = w.Write(append(head, '\n'))
	return err
}

// line prints one prose line prefixed with the elapsed time.
func (n *narrator) line(format string, args ...any) {
	_, err := fmt.Fprintf(n.w, "[%6.3fs] %s\n", time.Since(n.start).Seconds(), fmt.Sprintf(format, args...))
	n.keep(err)
}

// keep records err if it is the first.
func (n *narrator) keep(err error) {
	if err != nil && n.err == nil {
		n.err = fmt.Errorf("write the narration: %w", err)
	}
}
