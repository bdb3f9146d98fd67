package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/agent"
	"github.com/tenurehq/tenure/internal/fleetview"
	"github.com/tenurehq/tenure/internal/tenurebuild"
	"github.com/tenurehq/tenure/rpc"
)

// buildTenure builds the tenure binary of the enclosing repository into
// dir as a release build (internal/tenurebuild) and returns its path.
func buildTenure(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "tenure")
	cmd := tenurebuild.Command(ctx, "..", bin, nil, "./cmd/tenure") // the main module, beside this one
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/tenure: %w\n%s", err, out.Bytes())
	}
	return bin, nil
}

// tenureKey returns a new cluster key from `tenure keygen`.
func tenureKey(ctx context.Context, bin string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, "keygen").Output()
	if err != nil {
		return "", fmt.Errorf("tenure keygen: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// fleetConfig says how to start a tenure fleet.
type fleetConfig struct {
	bin    string
	key    string        // --encrypt
	dir    string        // work directory: data dirs, sockets, journals, logs
	n      int           // agents
	voters int           // agents 1..voters bootstrap with --expect voters
	ttl    time.Duration // --lease-ttl
	timing string        // --timing
}

// tenureAgent is one agent process of a fleet.
type tenureAgent struct {
	name    string
	sock    string
	journal string
	debug   string // --debug-addr, which serves the counters
	p       *proc
}

// tenureFleet is n `tenure agent` processes on 127.0.0.1 in quorum mode
// with one cluster key. Agent i has ID i, so the highest live agent is the
// one the election picks; every agent runs --voters VOTERS, so the
// agents above the voters are observers that may lead.
type tenureFleet struct {
	cfg     fleetConfig
	agents  []*tenureAgent
	started time.Time // when the first agent was started

	mu      sync.Mutex
	clients map[string]*rpc.Client
}

// startFleet starts the agents; on error it stops those already started.
func startFleet(cfg fleetConfig) (*tenureFleet, error) {
	pp, err := newPorts(3*cfg.n + 8)
	if err != nil {
		return nil, err
	}
	f := &tenureFleet{cfg: cfg, clients: map[string]*rpc.Client{}}
	type addrs struct{ gossip, peer, debug string }
	var all []addrs
	for i := 1; i <= cfg.n; i++ {
		var a addrs
		for _, s := range []*string{&a.gossip, &a.peer, &a.debug} {
			port, err := pp.take()
			if err != nil {
				return nil, err
			}
			*s = fmt.Sprintf("127.0.0.1:%d", port)
		}
		all = append(all, a)
	}
	f.started = time.Now()
	for i := 1; i <= cfg.n; i++ {
		name := fmt.Sprintf("t%03d", i)
		a := &tenureAgent{
			name:    name,
			sock:    filepath.Join(cfg.dir, name+".sock"),
			journal: filepath.Join(cfg.dir, name+".journal"),
			debug:   all[i-1].debug,
		}
		args := []string{"agent", "--name", name, "--id", fmt.Sprint(i),
			"--bind", all[i-1].gossip, "--peer-bind", all[i-1].peer,
			"--socket", a.sock, "--data-dir", filepath.Join(cfg.dir, name),
			"--journal", a.journal, "--debug-addr", a.debug,
			"--encrypt", cfg.key, "--timing", cfg.timing, "--lease-ttl", cfg.ttl.String(),
			"--voters", fmt.Sprint(cfg.voters), "--max-members", fmt.Sprint(max(2*cfg.n, 128)),
			"--log-level", "info",
		}
		if i <= cfg.voters {
			args = append(args, "--expect", fmt.Sprint(cfg.voters))
		}
		for j := 0; j < min(3, cfg.n); j++ { // everyone joins agents 1-3, the first voters
			if j != i-1 {
				args = append(args, "--join", all[j].gossip)
			}
		}
		a.p, err = startProc(name, filepath.Join(cfg.dir, name+".log"), false, cfg.bin, args...)
		if err != nil {
			f.stop()
			return nil, err
		}
		f.agents = append(f.agents, a)
	}
	return f, nil
}

// stop kills every agent and closes the clients.
func (f *tenureFleet) stop() {
	f.mu.Lock()
	for name, c := range f.clients {
		c.Close()
		delete(f.clients, name)
	}
	f.mu.Unlock()
	var ps []*proc
	for _, a := range f.agents {
		ps = append(ps, a.p)
	}
	stopAll(ps)
}

// agent returns the agent named name, or nil.
func (f *tenureFleet) agent(name string) *tenureAgent {
	for _, a := range f.agents {
		if a.name == name {
			return a
		}
	}
	return nil
}

// live lists the agents whose process runs and was not stopped by the
// suite.
func (f *tenureFleet) live() []*tenureAgent {
	var out []*tenureAgent
	for _, a := range f.agents {
		if !a.p.killed && a.p.alive() {
			out = append(out, a)
		}
	}
	return out
}

// procs lists the live agents' processes.
func (f *tenureFleet) procs() []*proc {
	var out []*proc
	for _, a := range f.live() {
		out = append(out, a.p)
	}
	return out
}

// exitedEarly names the agents that exited without being stopped (a port
// taken, a crash): their logs say why.
func (f *tenureFleet) exitedEarly() []string {
	var out []string
	for _, a := range f.agents {
		if !a.p.killed && !a.p.alive() {
			out = append(out, a.name)
		}
	}
	return out
}

// client returns a connected socket client of a, dialling it if needed.
func (f *tenureFleet) client(ctx context.Context, a *tenureAgent) (*rpc.Client, error) {
	f.mu.Lock()
	c := f.clients[a.name]
	f.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := rpc.Dial(ctx, a.sock)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", a.name, err)
	}
	f.mu.Lock()
	f.clients[a.name] = c
	f.mu.Unlock()
	return c, nil
}

// statuses asks every live agent for its status at once (nil for those that
// did not answer within a second).
func (f *tenureFleet) statuses(ctx context.Context) map[string]*rpc.Status {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	out := map[string]*rpc.Status{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, a := range f.live() {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			var st *rpc.Status
			if c, err := f.client(ctx, a); err == nil {
				if s, err := c.Status(ctx); err == nil {
					st = &s
				} else {
					f.mu.Lock()
					delete(f.clients, a.name) // redial next round
					f.mu.Unlock()
					c.Close()
				}
			}
			mu.Lock()
			out[a.name] = st
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// agreement is a leader every live agent named in one round of statuses.
type agreement struct {
	Leader string    `json:"leader"`
	Epoch  uint64    `json:"epoch"`
	At     time.Time `json:"at"`
}

// waitAgree polls the live agents every interval until they all name the
// same leader, other than not, that says it leads; or until timeout. The
// error of a timeout summarises what the agents said last.
func (f *tenureFleet) waitAgree(ctx context.Context, not string, interval, timeout time.Duration) (agreement, error) {
	deadline := time.Now().Add(timeout)
	var last map[string]*rpc.Status
	for time.Now().Before(deadline) {
		at := time.Now()
		last = f.statuses(ctx)
		if leader, epoch, ok := fleetview.Agreed(last, not); ok {
			return agreement{Leader: leader, Epoch: epoch, At: at}, nil
		}
		if gone := f.exitedEarly(); len(gone) > 0 {
			return agreement{}, fmt.Errorf("agents exited by themselves (see their logs in %s): %v", f.cfg.dir, gone)
		}
		if err := sleep(ctx, max(0, interval-time.Since(at))); err != nil {
			return agreement{}, err
		}
	}
	return agreement{}, fmt.Errorf("no agreement on a leader within %v: %s", timeout, fleetview.Summarize(last))
}

// readJournal reads an agent's journal (agent.JournalEntry lines).
func readJournal(path string) ([]agent.JournalEntry, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	defer fh.Close()
	var out []agent.JournalEntry
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		var e agent.JournalEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // a line being written: read it next time
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// waitLead polls the journals of the live agents other than not until
// one records a lead after since, and returns that entry.
func (f *tenureFleet) waitLead(ctx context.Context, not string, since time.Time, timeout time.Duration) (agent.JournalEntry, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, a := range f.live() {
			if a.name == not {
				continue
			}
			es, err := readJournal(a.journal)
			if err != nil {
				return agent.JournalEntry{}, err
			}
			for _, e := range es {
				if e.Event == agent.JournalLead && e.T > since.UnixNano() {
					return e, nil
				}
			}
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return agent.JournalEntry{}, err
		}
	}
	return agent.JournalEntry{}, fmt.Errorf("no agent but %s journaled a lead within %v", not, timeout)
}

// safetyFloor is the earliest instant at which every voter's promise to
// the leader whose journal is at path can have run out, from the last
// lease the journal records before at: the leader counts its deadline
// from the send time of its last renewal as send + TTL × (1 − drift), and
// a voter promises until its receive time + TTL, so the promises end about
// send + TTL = until + TTL × drift. (A renewal the voters granted but the
// killed leader never journaled would move the floor up to TTL/3 later;
// on loopback the window for that is a few hundred microseconds.)
func safetyFloor(path string, at time.Time, ttl time.Duration, drift float64) (time.Time, error) {
	es, err := readJournal(path)
	if err != nil {
		return time.Time{}, err
	}
	var until int64
	for _, e := range es {
		if e.T <= at.UnixNano() && e.Until > 0 && (e.Event == agent.JournalLead || e.Event == agent.JournalExtend) {
			until = e.Until
		}
	}
	if until == 0 {
		return time.Time{}, fmt.Errorf("journal %s records no lease before %v", path, at)
	}
	return time.Unix(0, until).Add(time.Duration(float64(ttl) * drift)), nil
}

// counters fetches the counters of every live agent but not
// (agent.Agent.Counters, from the hidden --debug-addr) and sums them by
// key. Leaving out the agent about to be stopped keeps two readings
// comparable.
func (f *tenureFleet) counters(ctx context.Context, not string) (map[string]uint64, error) {
	sum := map[string]uint64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	sem := make(chan struct{}, 16)
	for _, a := range f.live() {
		if a.name == not {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			c, err := fetchCounters(ctx, a.debug)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", a.name, err))
				return
			}
			for k, v := range c {
				sum[k] += v
			}
		})
	}
	wg.Wait()
	return sum, errors.Join(errs...)
}

func fetchCounters(ctx context.Context, addr string) (map[string]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/tenure/counters", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("counters: %w", err)
	}
	defer resp.Body.Close()
	var c map[string]uint64
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		return nil, fmt.Errorf("counters: %w", err)
	}
	return c, nil
}

// Traffic is the peer messages the agents sent between two readings of
// their counters: requests sent plus the replies that carried a message,
// and the bytes of the requests (the agents do not count reply bytes).
// Gossip (serf) traffic is not counted.
type Traffic struct {
	Messages         uint64            `json:"messages"`
	ElectionMessages uint64            `json:"election_messages"` // ELECTION, ANSWER, COORDINATOR, RESIGN, INFO
	RequestBytes     uint64            `json:"request_bytes"`
	ByKind           map[string]uint64 `json:"by_kind"`
}

// bullyKinds are the counter kinds of the election's own messages.
var bullyKinds = map[string]bool{"election": true, "answer": true, "coordinator": true, "resign": true, "info": true}

// traffic is what the counters grew by from before to after.
func traffic(before, after map[string]uint64) Traffic {
	t := Traffic{ByKind: map[string]uint64{}}
	for k, v := range after {
		d := v - min(v, before[k])
		if d == 0 {
			continue
		}
		kind, sub, _ := strings.Cut(k, ".")
		switch kind {
		case "send", "reply":
			t.Messages += d
			t.ByKind[sub] += d
			if bullyKinds[sub] {
				t.ElectionMessages += d
			}
		case "send_bytes":
			t.RequestBytes += d
		}
	}
	return t
}
