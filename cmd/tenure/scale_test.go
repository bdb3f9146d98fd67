//go:build scale

package main

// The scale run: N real agent processes on 127.0.0.1, in quorum mode with a
// cluster key, VOTERS of them voters (started with --expect VOTERS) and the
// rest observers (every agent runs --voters VOTERS, so the set stays full). It measures how long they take to agree on one leader,
// the epoch they agree on, what each agent costs while idle, and how long
// the rest take to agree on a new leader after the leader is killed with
// SIGKILL. It is not part of the default test run:
//
//	make scale                 # N=100 VOTERS=5
//	make scale N=10 VOTERS=3   # the CI-sized form

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/fleetview"
	"github.com/tenurehq/tenure/internal/loopports"
	"github.com/tenurehq/tenure/rpc"
)

var (
	scaleN         = flag.Int("scale.n", 10, "agents to start")
	scaleVoters    = flag.Int("scale.voters", 5, "voters among them: they bootstrap with --expect VOTERS, and every agent runs --voters VOTERS")
	scaleObservers = flag.String("scale.observers", "voters", "how the others are kept from voting: voters (--voters VOTERS: they may vote, the set is full) or flag (--voter=false)")
	scaleTiming    = flag.String("scale.timing", "lan", "timing profile of the agents: lan or local")
	scaleTTL       = flag.Duration("scale.ttl", 0, "--lease-ttl of the agents (0: the agent's default)")
	scaleAgree     = flag.Duration("scale.agree", 10*time.Second, "target: all agents agree on a leader within this long of the first start")
	scaleFailover  = flag.Duration("scale.failover", 0, "target: the others agree on a new leader within this long of the leader's kill (0: the lease TTL plus 5 s)")
	scaleWait      = flag.Duration("scale.wait", 3*time.Minute, "give up waiting for agreement after this long")
	scaleIdle      = flag.Duration("scale.idle", time.Minute, "idle window over which CPU and RSS are measured")
	scalePort      = flag.Int("scale.port", 0, "first port (0: a free range is picked); agent i uses port+2i and port+2i+1")
	scaleOut       = flag.String("scale.out", "", "append the result as one JSON line to this file")
	scaleKeep      = flag.Bool("scale.keep", false, "keep the work directory (logs) after the run")
	scaleSeeds     = flag.String("scale.seeds", "first", "which agents the others --join: first (agents 1-3, voters) or last (the three highest, observers when VOTERS < N-2)")
	scaleDebug     = flag.String("scale.debug", "", "comma-separated agent names (s001,s100) that log at debug level, to follow a slow start")
	scaleEnv       = flag.String("scale.env", "", "comma-separated KEY=VALUE settings added to the agents' environment (GOMAXPROCS=1,GOGC=200), to measure runtime settings")
	scaleBinary    = flag.String("scale.binary", "", "run this tenure binary instead of the one built from this tree (to measure an older version); it gets no --debug-addr, so no counters or profiles")
)

// scaleAgent is one agent process of the run.
type scaleAgent struct {
	i      int
	name   string
	voter  bool
	sock   string
	gossip string
	debug  string // the agent's debug address
	cmd    *exec.Cmd
	log    *os.File
	dead   bool          // killed by the run
	exited chan struct{} // closed when the process has exited
	// launched is when the run started the process.
	launched time.Time
}

// scaleResult is what the run measured.
type scaleResult struct {
	N             int        `json:"n"`
	Voters        int        `json:"voters"`
	Timing        string     `json:"timing"`
	StartAll      float64    `json:"start_all_s"`
	Agree         float64    `json:"agree_s"`        // -1: no agreement within the wait
	AgreePolled   float64    `json:"agree_polled_s"` // by the end of the poll round that found it (an upper bound)
	Epoch         uint64     `json:"epoch"`
	Leader        string     `json:"leader"`
	Failover      float64    `json:"failover_s"` // -1: none within the wait
	FailoverEpoch uint64     `json:"failover_epoch"`
	StartCPU      float64    `json:"start_cpu_s"`    // mean CPU seconds per agent from start to agreement
	VersionCPU    float64    `json:"version_cpu_ms"` // mean CPU milliseconds of one `tenure --version` on the idle machine (versionCPU)
	Idle          idleResult `json:"idle"`
	Load          [2]string  `json:"load"` // load average at start and end
}

func TestScale(t *testing.T) {
	n, voters := *scaleN, *scaleVoters
	if voters < 1 || voters > n {
		t.Fatalf("-scale.voters %d: want 1..%d", voters, n)
	}
	work, err := os.MkdirTemp("", "tenure-scale-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if *scaleKeep || t.Failed() {
			t.Logf("logs kept in %s", work)
			return
		}
		os.RemoveAll(work)
	})
	res := scaleResult{N: n, Voters: voters, Timing: *scaleTiming, Agree: -1, Failover: -1}
	bin := cmp.Or(*scaleBinary, binary)
	if cpu, err := versionCPU(bin, 40); err != nil {
		t.Fatal(err)
	} else {
		res.VersionCPU = float64(cpu.Microseconds()) / 1000
		t.Logf("%s --version takes %.1f ms of CPU on the idle machine (the mean of 40 starts)", filepath.Base(bin), res.VersionCPU)
	}
	res.Load[0] = loadAverage()
	agents := scaleAgents(t, work, n, voters)
	t.Cleanup(func() { stopAgents(agents) })

	start := time.Now()
	for _, a := range agents {
		a.start(t, agents, scaleKey(t))
	}
	res.StartAll = time.Since(start).Seconds()
	time.AfterFunc(3*time.Second, func() {
		if gone := exitedEarly(agents); len(gone) > 0 {
			t.Logf("agents exited by themselves (see their logs): %v", gone)
		}
	})
	t.Logf("started %d agents in %.1fs (load %s)", n, res.StartAll, loadAverage())
	var profiles sync.WaitGroup
	defer profiles.Wait()
	time.AfterFunc(max(0, 5*time.Second-time.Since(start)), func() {
		for _, a := range []*scaleAgent{agents[0], agents[min(voters, n-1)], agents[n-1]} {
			profile(t, &profiles, a, 20*time.Second, "start")
		}
	})

	pl := newPoller(agents)
	defer pl.close()
	leader, ok := pl.waitAgree(t, start, *scaleWait, "")
	if ok {
		res.AgreePolled, res.Epoch, res.Leader = leader.at.Sub(start).Seconds(), leader.epoch, leader.name
		res.Agree = res.AgreePolled
		if at, err := agreedSince(agents, leader); err != nil {
			t.Logf("the instant of agreement is not known (%v): counting the poll's", err)
		} else {
			res.Agree = at.Sub(start).Seconds()
		}
		// The launch is serial and slows down as the first agents load the
		// machine; a fleet's hosts start their agents in parallel. Both
		// times are reported; the target counts from the first start.
		t.Logf("all %d agree on %s epoch %d after %.1fs, %.1fs after the last agent was launched (the poll round of %.2fs that found it ended at %.1fs)",
			n, leader.name, leader.epoch, res.Agree, res.Agree-res.StartAll, leader.took.Seconds(), res.AgreePolled)
	}
	pl.close()
	res.StartCPU = cpuSeconds(agents)
	t.Logf("CPU used per agent from the start to agreement: %.2f s (voters %.2f s, observers %.2f s)",
		res.StartCPU, cpuSeconds(agents[:voters]), cpuSeconds(agents[voters:]))
	t.Logf("the busiest agents: %s", busiest(agents, 8))
	if ok {
		logPaths(t, start, agents, leader.name)
	}
	logFleetMarks(t, agents)
	isVoter := func(name string) bool { return name <= agents[voters-1].name }
	all := func(string) bool { return true }
	c0 := fetchCounters(agents)
	logRates(t, "counters from the start to agreement (totals)", "", counterRates(counterSet{}, c0, 1, all))

	for _, a := range agents {
		if a.name == leader.name || a == agents[0] || (a == agents[min(voters, n-1)] && a.name != leader.name) {
			profile(t, &profiles, a, min(30*time.Second, *scaleIdle), "idle")
		}
	}
	res.Idle = measureIdle(t, agents, *scaleIdle)
	c1 := fetchCounters(agents)
	secs := res.Idle.Seconds
	logRates(t, "idle counters, voters", "/s", counterRates(c0, c1, secs, isVoter))
	logRates(t, "idle counters, observers", "/s", counterRates(c0, c1, secs, func(s string) bool { return !isVoter(s) && s != leader.name }))
	logRates(t, "idle counters, the leader", "/s", counterRates(c0, c1, secs, func(s string) bool { return s == leader.name }))
	_ = all

	if ok {
		// The leader may have changed while idle (a higher node preempting).
		pl := newPoller(agents)
		now, ok2 := pl.waitAgree(t, time.Now(), *scaleWait, "")
		pl.close()
		if ok2 && now.name != leader.name {
			t.Logf("the leader changed while idle: %s epoch %d", now.name, now.epoch)
		}
		if ok2 {
			res.Failover, res.FailoverEpoch = failover(t, agents, now.name)
		}
	}
	res.Load[1] = loadAverage()
	if gone := exitedEarly(agents); len(gone) > 0 {
		t.Errorf("agents exited by themselves (see their logs): %v", gone)
	}
	report(t, res)
	checkTargets(t, res)
}

// scaleAgents lays out the agents: names, ports, sockets and data dirs.
// Agents 1..voters are voters; the highest ID (an observer when voters < n)
// should lead.
func scaleAgents(t *testing.T, work string, n, voters int) []*scaleAgent {
	base := *scalePort
	if base == 0 {
		base = freePortRange(t, 3*n+3)
	}
	var out []*scaleAgent
	for i := 1; i <= n; i++ {
		out = append(out, &scaleAgent{
			i:      i,
			name:   fmt.Sprintf("s%03d", i),
			voter:  i <= voters,
			sock:   filepath.Join(work, fmt.Sprintf("s%03d.sock", i)),
			gossip: fmt.Sprintf("127.0.0.1:%d", base+2*i),
			debug:  fmt.Sprintf("127.0.0.1:%d", base+2*n+2+i),
		})
	}
	return out
}

var keyOnce = sync.OnceValue(func() string {
	key := make([]byte, keyBytes)
	rand.Read(key)
	return base64.StdEncoding.EncodeToString(key)
})

func scaleKey(*testing.T) string { return keyOnce() }

// logPath is where a's log goes: beside its socket.
func (a *scaleAgent) logPath() string {
	return filepath.Join(filepath.Dir(a.sock), a.name+".log")
}

// logLevel is the --log-level of a: debug where -scale.debug names it.
func (a *scaleAgent) logLevel() string {
	if slices.Contains(strings.Split(*scaleDebug, ","), a.name) {
		return "debug"
	}
	return "info"
}

// start starts agent a's process, joining three seed agents (-scale.seeds).
func (a *scaleAgent) start(t *testing.T, all []*scaleAgent, key string) {
	dir := filepath.Dir(a.sock)
	host, port, _ := net.SplitHostPort(a.gossip)
	var peerPort int
	fmt.Sscan(port, &peerPort)
	args := []string{"agent", "--name", a.name, "--id", fmt.Sprint(a.i),
		"--bind", a.gossip, "--peer-bind", net.JoinHostPort(host, fmt.Sprint(peerPort+1)),
		"--socket", a.sock, "--data-dir", filepath.Join(dir, a.name),
		"--encrypt", key, "--timing", *scaleTiming, "--log-level", a.logLevel(),
		"--max-members", fmt.Sprint(max(2*len(all), 128)),
	}
	seeds := all[:min(3, len(all))]
	if *scaleSeeds == "last" {
		seeds = all[max(0, len(all)-3):]
	}
	for _, s := range seeds {
		if s != a {
			args = append(args, "--join", s.gossip)
		}
	}
	switch {
	case a.voter:
		args = append(args, "--expect", fmt.Sprint(*scaleVoters), "--voters", fmt.Sprint(*scaleVoters))
	case *scaleObservers == "flag":
		args = append(args, "--voter=false")
	default:
		args = append(args, "--voters", fmt.Sprint(*scaleVoters)) // may vote; the set is full
	}
	if *scaleTTL > 0 {
		args = append(args, "--lease-ttl", scaleTTL.String())
	}
	bin := binary
	if *scaleBinary != "" {
		bin, a.debug = *scaleBinary, ""
	}
	if a.debug != "" {
		args = append(args, "--debug-addr", a.debug)
	}
	log, err := os.Create(a.logPath())
	if err != nil {
		t.Fatal(err)
	}
	a.log = log
	a.cmd = exec.Command(bin, args...)
	a.cmd.Stdout, a.cmd.Stderr = log, log
	if *scaleEnv != "" {
		a.cmd.Env = append(os.Environ(), strings.Split(*scaleEnv, ",")...)
	}
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	a.launched = time.Now()
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", a.name, err)
	}
	a.exited = make(chan struct{})
	go func() {
		a.cmd.Wait()
		close(a.exited)
	}()
}

// exitedEarly lists the agents whose process ended without being killed
// by the run (a port taken, a crash): their log says why.
func exitedEarly(agents []*scaleAgent) []string {
	var out []string
	for _, a := range agents {
		select {
		case <-a.exited:
			if !a.dead {
				out = append(out, a.name)
			}
		default:
		}
	}
	return out
}

func stopAgents(agents []*scaleAgent) {
	for _, a := range agents {
		if a.cmd != nil && a.cmd.Process != nil && !a.dead {
			a.cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	for _, a := range agents {
		if a.exited != nil {
			<-a.exited
			a.dead = true
		}
		if a.log != nil {
			a.log.Close()
		}
	}
}

// freePortRange finds count consecutive ports free for TCP and UDP on
// 127.0.0.1, below Linux's ephemeral range (32768-60999): the agents' own
// outgoing connections take ports from that range, and would take the
// listening port of an agent started after them.
func freePortRange(t *testing.T, count int) int {
	for try := 0; try < 50; try++ {
		base := 10000 + int(time.Now().UnixNano()%int64(32768-10000-count))
		if loopports.Free(base, count) {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

// agreement is a leader all polled agents named at the same instant.
type agreement struct {
	name  string
	epoch uint64
	// at is when the poll round that found the agreement ended: the
	// fleet may have agreed a little earlier, but not later.
	at   time.Time
	took time.Duration // how long that round took
}

// poller asks agents for their status over their sockets, one client each.
type poller struct {
	agents  []*scaleAgent
	mu      sync.Mutex
	clients map[string]*rpc.Client
}

func newPoller(agents []*scaleAgent) *poller {
	return &poller{agents: agents, clients: map[string]*rpc.Client{}}
}

func (p *poller) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, c := range p.clients {
		c.Close()
		delete(p.clients, name)
	}
}

// status asks one agent; nil when it cannot be reached yet.
func (p *poller) status(ctx context.Context, a *scaleAgent) *rpc.Status {
	p.mu.Lock()
	c := p.clients[a.name]
	p.mu.Unlock()
	if c == nil {
		var err error
		if c, err = rpc.Dial(ctx, a.sock); err != nil {
			return nil
		}
		p.mu.Lock()
		p.clients[a.name] = c
		p.mu.Unlock()
	}
	st, err := c.Status(ctx)
	if err != nil {
		return nil
	}
	return &st
}

// round asks every live agent at once and returns their statuses (nil for
// those that did not answer).
func (p *poller) round() map[string]*rpc.Status {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out := map[string]*rpc.Status{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, a := range p.agents {
		if a.dead {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			st := p.status(ctx, a)
			<-sem
			mu.Lock()
			out[a.name] = st
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// waitAgree polls until every live agent names the same leader (other than
// not) and that leader says it leads, or until wait has passed since start.
func (p *poller) waitAgree(t *testing.T, start time.Time, wait time.Duration, not string) (agreement, bool) {
	last := time.Time{}
	for time.Since(start) < wait {
		at := time.Now()
		sts := p.round()
		if name, epoch, ok := fleetview.Agreed(sts, not); ok {
			return agreement{name: name, epoch: epoch, at: time.Now(), took: time.Since(at)}, true
		}
		if time.Since(last) > 10*time.Second {
			last = time.Now()
			t.Logf("%5.1fs: %s (load %s)", time.Since(start).Seconds(), fleetview.Summarize(sts), loadAverage())
		}
		time.Sleep(max(0, 250*time.Millisecond-time.Since(at)))
	}
	t.Logf("no agreement after %v: %s", wait, fleetview.Summarize(p.round()))
	return agreement{}, false
}

// agreedSince is the instant the agents came to agree on leader: the
// latest of the times each began to name it, which the first event of a
// watch reports (docs/PROTOCOL.md, section 6.8). It is asked once the polls
// have found the agreement, so the watches cost the start nothing; an
// agent that names another leader or epoch by then is an error.
func agreedSince(agents []*scaleAgent, leader agreement) (time.Time, error) {
	var latest time.Time
	for _, a := range agents {
		if a.dead {
			continue
		}
		ev, err := firstEvent(a)
		if err != nil {
			return time.Time{}, fmt.Errorf("%s: %w", a.name, err)
		}
		if ev.Leader == nil || ev.Leader.Node != leader.name || ev.Epoch != leader.epoch {
			return time.Time{}, fmt.Errorf("%s now names %+v at epoch %d", a.name, ev.Leader, ev.Epoch)
		}
		at, err := time.Parse(time.RFC3339Nano, ev.Time)
		if err != nil {
			return time.Time{}, fmt.Errorf("%s: event time %q: %w", a.name, ev.Time, err)
		}
		if at.After(latest) {
			latest = at
		}
	}
	return latest, nil
}

// firstEvent opens a watch on a and returns its first event, the state a
// is in and when that began.
func firstEvent(a *scaleAgent) (rpc.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, a.sock)
	if err != nil {
		return rpc.Event{}, err
	}
	defer c.Close()
	w, err := c.Watch(ctx)
	if err != nil {
		return rpc.Event{}, err
	}
	defer w.Close()
	return w.Next(ctx)
}

// failover kills the leader with SIGKILL and measures how long the others
// take to agree on another one.
func failover(t *testing.T, agents []*scaleAgent, leader string) (float64, uint64) {
	var rest []*scaleAgent
	for _, a := range agents {
		if a.name != leader {
			rest = append(rest, a)
			continue
		}
		a.dead = true
		a.cmd.Process.Signal(syscall.SIGKILL)
		<-a.exited
	}
	killed := time.Now()
	pl := newPoller(rest)
	defer pl.close()
	l, ok := pl.waitAgree(t, killed, *scaleWait, leader)
	if !ok {
		return -1, 0
	}
	d := l.at.Sub(killed).Seconds()
	t.Logf("after killing %s, the other %d agree on %s epoch %d after %.1fs", leader, len(rest), l.name, l.epoch, d)
	return d, l.epoch
}

// loadAverage is the first three fields of /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], " ")
}

func report(t *testing.T, r scaleResult) {
	t.Logf("| N | voters | timing | time to agree | epoch at agreement | failover | epoch after | CPU per agent to agree | RSS per agent (mean/max) | CPU per agent idle (mean/max) | wakeups/s per agent idle | sockets per agent (mean/max) | load |")
	t.Logf("| %d | %d | %s | %s | %d | %s | %d | %.2f s | %.1f/%.1f MiB | %.2f/%.2f %% | %.0f | %.1f/%d | %s → %s |",
		r.N, r.Voters, r.Timing, secs(r.Agree), r.Epoch, secs(r.Failover), r.FailoverEpoch, r.StartCPU,
		r.Idle.RSSMeanMiB, r.Idle.RSSMaxMiB, r.Idle.CPUMeanPct, r.Idle.CPUMaxPct, r.Idle.WakeupsMean,
		r.Idle.SocketsMean, r.Idle.SocketsMax, r.Load[0], r.Load[1])
	if *scaleOut == "" {
		return
	}
	b, _ := json.Marshal(r)
	f, err := os.OpenFile(*scaleOut, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("write %s: %v", *scaleOut, err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s\n", b)
}

func secs(s float64) string {
	if s < 0 {
		return "none"
	}
	return fmt.Sprintf("%.1f s", s)
}

// checkTargets fails the test when a target was missed.
func checkTargets(t *testing.T, r scaleResult) {
	if r.Agree < 0 {
		t.Errorf("%d agents did not agree on a leader within %v", r.N, *scaleWait)
	} else if r.Agree > scaleAgree.Seconds() {
		t.Errorf("%d agents agreed after %.1fs, target %v", r.N, r.Agree, *scaleAgree)
	}
	target := *scaleFailover
	if target == 0 {
		target = agentTTL() + 5*time.Second
	}
	if r.Failover < 0 {
		t.Errorf("no new leader agreed within %v of killing the leader", *scaleWait)
	} else if r.Failover > target.Seconds() {
		t.Errorf("failover took %.1fs, target %v", r.Failover, target)
	}
}

// agentTTL is the agents' lease TTL.
func agentTTL() time.Duration {
	if *scaleTTL > 0 {
		return *scaleTTL
	}
	return 10 * time.Second
}
