//go:build nemesis

package nemesis

import (
	"cmp"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/internal/netns"
	"github.com/tenurehq/tenure/internal/tmpfs"
	"github.com/tenurehq/tenure/test/nemesis/check"
)

// Fixed parts of every cluster.
const (
	// RunGrace is `tenure run --grace` on every node: well under two thirds
	// of the lease TTL, as the README asks.
	RunGrace   = 300 * time.Millisecond
	storeOctet = 100
	storePort  = 8080
	stopWait   = 15 * time.Second // a process still running this long after SIGTERM is killed
)

// Config describes a cluster.
type Config struct {
	// Dir is the run directory: the agents' journal-<node>.jsonl, the
	// writers' history-<node>.jsonl, events.jsonl, and per node a
	// directory with its data dir, socket and logs.
	Dir string
	Bin Binaries
	Net *netns.Network
	// Voters is the number of nodes h1..hN that bootstrap together with
	// --expect N.
	Voters int
	// TTL is every agent's --lease-ttl.
	TTL time.Duration
	// Timing is every agent's --timing profile; "" is local, the profile
	// of the other namespace tests (lan is production's, and wants a
	// longer TTL and election bound).
	Timing string
	// Broken is TENURE_BROKEN for every process (agents, supervisors,
	// store); it needs a build with the tenure_broken tag.
	Broken []string
	// Ineligible names nodes started with --eligible=false.
	Ineligible []string
	// AgentLogLevel is every agent's --log-level; "" leaves the agents'
	// default (info). The agents' logs are agent.log in each node's dir.
	AgentLogLevel string
	// Logger reports the run's progress; nil discards it.
	Logger *slog.Logger
}

// Cluster is the store and the nodes of one run. Not safe for concurrent
// use: one goroutine drives it.
type Cluster struct {
	cfg    Config
	key    string // --encrypt
	events *Events
	stalls *stallWatch
	delays *delayer
	store  *netns.Proc
	// StoreHost is the fenced store's namespace.
	StoreHost netns.Host
	nodes     []*Node
	partition Partition // the network fault on, if any (Partition, HealNetwork)
}

// Start makes the hosts, starts the store, then h1..hN's agents and their
// `tenure run` supervisors, as an operator would: default ports on
// 0.0.0.0, no --advertise, a cluster key, --expect N, every agent
// joining h1..hN.
func Start(cfg Config) (_ *Cluster, err error) {
	if len(cfg.Broken) > 0 && !cfg.Bin.Broken {
		return nil, errors.New("nemesis: TENURE_BROKEN needs binaries built with -tags tenure_broken")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{cfg: cfg, delays: newDelayer(cfg.Logger)}
	if c.key, err = newKey(); err != nil {
		return nil, err
	}
	if c.events, err = OpenEvents(filepath.Join(cfg.Dir, "events.jsonl")); err != nil {
		return nil, err
	}
	c.stalls = watchStalls(c.events, cfg.Logger, readClock)
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if err := c.startStore(); err != nil {
		return nil, err
	}
	for i := 1; i <= cfg.Voters; i++ {
		if _, err := c.addNode(cfg.Voters); err != nil {
			return nil, err
		}
	}
	if err := c.StartAgents(c.nodes...); err != nil {
		return nil, err
	}
	for _, n := range c.nodes {
		if err := c.startRun(n); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Nodes returns the cluster's nodes, h1 first.
func (c *Cluster) Nodes() []*Node { return slices.Clone(c.nodes) }

// Node returns the node named name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// AddNode adds a node with the next ID, the highest, that joins the
// running cluster (--expect 0: an observer until the leader promotes it),
// and starts its agent and supervisor.
func (c *Cluster) AddNode() (*Node, error) {
	n, err := c.addNode(0)
	if err != nil {
		return nil, err
	}
	if err := c.StartAgents(n); err != nil {
		return nil, err
	}
	return n, c.startRun(n)
}

func (c *Cluster) addNode(expect int) (*Node, error) {
	id := len(c.nodes) + 1
	name := fmt.Sprintf("h%d", id)
	host, err := c.cfg.Net.Add(name, id)
	if err != nil {
		return nil, err
	}
	n := &Node{Name: name, ID: id, Host: host, dir: filepath.Join(c.cfg.Dir, name), expect: expect,
		eligible: !slices.Contains(c.cfg.Ineligible, name)}
	if err := os.MkdirAll(n.disk(), 0o700); err != nil {
		return nil, fmt.Errorf("nemesis: %w", err)
	}
	if err := tmpfs.Mount(n.disk(), diskSize); err != nil {
		return nil, fmt.Errorf("nemesis: %s's disk: %w", name, err)
	}
	n.mounted = true
	c.nodes = append(c.nodes, n)
	return n, nil
}

// diskSize is the size of a node's disk: room for the data dir (a few
// KiB, and the gossip snapshot) many times over.
const diskSize = "32m"

// FillDisk records that n's disk is full, then fills it: the agent's next
// write to its data dir fails with ENOSPC.
func (c *Cluster) FillDisk(n *Node) error {
	if _, err := c.events.Record(check.EventDiskFull, []string{n.Name}, n.disk()); err != nil {
		return err
	}
	n.diskFull = true
	if err := tmpfs.Fill(n.filler()); err != nil {
		return fmt.Errorf("nemesis: %s's disk: %w", n.Name, err)
	}
	return nil
}

// FreeDisk removes what FillDisk wrote, then records it.
func (c *Cluster) FreeDisk(n *Node) error {
	if err := os.Remove(n.filler()); err != nil {
		return fmt.Errorf("nemesis: free %s's disk: %w", n.Name, err)
	}
	n.diskFull = false
	_, err := c.events.Record(check.EventDiskFreed, []string{n.Name}, n.disk())
	return err
}

// unmountDisks unmounts the nodes' disks once their agents are stopped
// (lazily: a process that still holds a file there keeps it until it
// exits).
func (c *Cluster) unmountDisks() error {
	var errs []error
	for _, n := range c.nodes {
		if !n.mounted {
			continue
		}
		if err := tmpfs.Unmount(n.disk()); err != nil {
			errs = append(errs, fmt.Errorf("nemesis: %s's disk: %w", n.Name, err))
			continue
		}
		n.mounted = false
	}
	return errors.Join(errs...)
}

func (c *Cluster) startStore() error {
	h, err := c.cfg.Net.Add("store", storeOctet)
	if err != nil {
		return err
	}
	c.StoreHost = h
	dir := filepath.Join(c.cfg.Dir, "store")
	cmd := h.Command(c.cfg.Bin.Store, "--listen", fmt.Sprintf("0.0.0.0:%d", storePort), "--data-dir", filepath.Join(dir, "data"))
	cmd.Env = c.env()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("nemesis: %w", err)
	}
	c.store, err = netns.Start(cmd, filepath.Join(dir, "store.log"))
	return err
}

// StoreURL is the store's address as the writers use it.
func (c *Cluster) StoreURL() string { return fmt.Sprintf("http://%s:%d", c.StoreHost.Addr, storePort) }

// env is the environment of every process the cluster starts: the
// harness's own without TENURE_ settings, plus TENURE_BROKEN if set.
func (c *Cluster) env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TENURE_") {
			env = append(env, kv)
		}
	}
	if len(c.cfg.Broken) > 0 {
		env = append(env, "TENURE_BROKEN="+strings.Join(c.cfg.Broken, ","))
	}
	return append(env, extra...)
}

// StartAgents records a start of nodes and starts their agents.
func (c *Cluster) StartAgents(nodes ...*Node) error {
	if _, err := c.events.Record(check.EventStart, names(nodes), ""); err != nil {
		return err
	}
	for _, n := range nodes {
		if n.agent != nil {
			return fmt.Errorf("nemesis: %s's agent already runs", n.Name)
		}
		cmd := n.Host.Command(c.cfg.Bin.Tenure, c.agentArgs(n)...)
		cmd.Env = c.env()
		p, err := netns.Start(cmd, filepath.Join(n.dir, "agent.log"))
		if err != nil {
			return err
		}
		n.agent, n.paused, n.pausedHost = p, false, false
	}
	return nil
}

func (c *Cluster) agentArgs(n *Node) []string {
	args := []string{"agent", "--name", n.Name, "--id", fmt.Sprint(n.ID),
		"--bind", "0.0.0.0:7946", "--peer-bind", fmt.Sprintf("0.0.0.0:%d", peerPort), "--encrypt", c.key,
		"--expect", fmt.Sprint(n.expect), "--data-dir", n.dataDir(), "--socket", n.Socket(),
		"--lease-ttl", c.cfg.TTL.String(), "--timing", cmp.Or(c.cfg.Timing, "local"),
		"--journal", filepath.Join(c.cfg.Dir, "journal-"+n.Name+".jsonl"),
		fmt.Sprintf("--eligible=%t", n.eligible)}
	if c.cfg.AgentLogLevel != "" {
		args = append(args, "--log-level", c.cfg.AgentLogLevel)
	}
	for _, m := range c.nodes[:c.cfg.Voters] {
		args = append(args, "--join", m.Host.Addr+":7946")
	}
	return args
}

// startRun starts `tenure run` with the writer on node n, and `tenure
// watch --json` (watch-<node>.jsonl in the run directory: which leader
// the agent names, for check.Blips); they run until the cluster stops,
// across restarts of the agent. The watch is an observer, not part of the
// host: a pause of the host does not stop it.
func (c *Cluster) startRun(n *Node) error {
	cmd := n.Host.Command(c.cfg.Bin.Tenure, "run", "--socket", n.Socket(), "--grace", RunGrace.String(), "--",
		c.cfg.Bin.Writer, "--store", c.StoreURL(), "--history", c.history(n))
	cmd.Env = c.env("NEMESIS_NODE=" + n.Name)
	p, err := netns.Start(cmd, filepath.Join(n.dir, "run.log"))
	n.run = p
	if err != nil {
		return err
	}
	// The events go to the JSON file, what the watch says of its
	// reconnections (stderr) to its log.
	cmd = n.Host.Command("/bin/sh", "-c", `exec "$0" watch --json --reconnect --socket "$1" 2>>"$2"`,
		c.cfg.Bin.Tenure, n.Socket(), filepath.Join(n.dir, "watch.log"))
	cmd.Env = c.env()
	n.watch, err = netns.Start(cmd, filepath.Join(c.cfg.Dir, "watch-"+n.Name+".jsonl"))
	return err
}

func (c *Cluster) history(n *Node) string {
	return filepath.Join(c.cfg.Dir, "history-"+n.Name+".jsonl")
}

// Kill records a kill of nodes, then SIGKILLs their agents and waits for
// them to die. Nodes whose agent is down are left out; a paused node must
// be resumed first.
func (c *Cluster) Kill(nodes ...*Node) error {
	nodes, err := running("kill", nodes)
	if err != nil || len(nodes) == 0 {
		return err
	}
	if _, err := c.events.Record(check.EventKill, names(nodes), ""); err != nil {
		return err
	}
	for _, n := range nodes {
		n.agent.Kill()
		n.agent = nil
	}
	return nil
}

// running returns the nodes whose agent runs, leaving out those whose
// agent is down, and refuses a paused one: a signal (act names it) would
// not reach a stopped process as the harness means it to.
func running(act string, nodes []*Node) ([]*Node, error) {
	nodes = slices.DeleteFunc(slices.Clone(nodes), func(n *Node) bool { return n.agent == nil })
	for _, n := range nodes {
		if n.paused || n.pausedHost {
			return nil, fmt.Errorf("nemesis: %s %s: paused", act, n.Name)
		}
	}
	return nodes, nil
}

// StopAgents records a graceful stop of nodes, then stops their agents
// with SIGTERM, as systemd would, one after the other: a leader hands its
// term over and a voter its seat before it goes. An agent that has to be
// killed after stopWait, or exits with an error, is an error.
func (c *Cluster) StopAgents(nodes ...*Node) error {
	nodes, err := running("stop", nodes)
	if err != nil || len(nodes) == 0 {
		return err
	}
	if _, err := c.events.Record(check.EventStop, names(nodes), ""); err != nil {
		return err
	}
	for _, n := range nodes {
		p := n.agent
		n.agent = nil
		if err := p.Stop(syscall.SIGTERM, stopWait); err != nil {
			return fmt.Errorf("nemesis: stop %s's agent: %w", n.Name, err)
		}
		if _, err := p.Exited(); err != nil {
			return fmt.Errorf("nemesis: %s's agent, stopped with SIGTERM, exited with %w", n.Name, err)
		}
	}
	return nil
}

// Wipe records a wipe of n's data dir and removes it; n's agent must be
// down.
func (c *Cluster) Wipe(n *Node) error {
	if n.agent != nil {
		return fmt.Errorf("nemesis: wipe %s: its agent runs", n.Name)
	}
	if _, err := c.events.Record(check.EventWipe, []string{n.Name}, n.dataDir()); err != nil {
		return err
	}
	if err := os.RemoveAll(n.dataDir()); err != nil {
		return fmt.Errorf("nemesis: wipe %s: %w", n.Name, err)
	}
	return nil
}

// readdressStep is what a readdress adds to a host's last octet, and takes
// off again the next time: node octets are their IDs (1-9), the store's
// is storeOctet.
const readdressStep = 150

// Readdress moves n's host to its other address (readdressStep), as a new
// DHCP lease does; n's agent must be down. Joins and partitions use the
// new address from then on. It reports whether the host moved back to
// its first address.
func (c *Cluster) Readdress(n *Node) (back bool, err error) {
	if n.agent != nil {
		return false, fmt.Errorf("nemesis: readdress %s: its agent runs", n.Name)
	}
	cut := strings.LastIndex(n.Host.Addr, ".")
	octet, err := strconv.Atoi(n.Host.Addr[cut+1:])
	if err != nil {
		return false, fmt.Errorf("nemesis: readdress %s: %w", n.Name, err)
	}
	back = octet > readdressStep
	if back {
		octet -= readdressStep
	} else {
		octet += readdressStep
	}
	next := fmt.Sprintf("%s.%d", n.Host.Addr[:cut], octet)
	// The old address goes first: deleting a subnet's primary address
	// deletes its secondaries too, and the new one would be one.
	if err := n.Host.Run("ip", "addr", "del", n.Host.Addr+"/24", "dev", "eth0"); err != nil {
		return back, fmt.Errorf("nemesis: readdress %s: %w", n.Name, err)
	}
	if err := n.Host.Run("ip", "addr", "add", next+"/24", "dev", "eth0"); err != nil {
		return back, fmt.Errorf("nemesis: readdress %s: %w", n.Name, err)
	}
	n.Host.Addr = next
	return back, nil
}

// Pause stops n's agent process only (SIGSTOP).
func (c *Cluster) Pause(n *Node) error {
	if !n.Up() {
		return fmt.Errorf("nemesis: pause %s: not running", n.Name)
	}
	if _, err := c.events.Record(check.EventPause, []string{n.Name}, ""); err != nil {
		return err
	}
	n.paused = true
	return n.agent.Signal(syscall.SIGSTOP)
}

// Resume continues n's agent after Pause.
func (c *Cluster) Resume(n *Node) error {
	if _, err := c.events.Record(check.EventResume, []string{n.Name}, ""); err != nil {
		return err
	}
	n.paused = false
	return n.agent.Signal(syscall.SIGCONT)
}

// PauseHost stops everything of n: its supervisor, writer and agent.
func (c *Cluster) PauseHost(n *Node) error {
	if !n.Up() {
		return fmt.Errorf("nemesis: pause %s's host: not running", n.Name)
	}
	if _, err := c.events.Record(check.EventPauseHost, []string{n.Name}, ""); err != nil {
		return err
	}
	n.pausedHost = true
	return n.stopHost()
}

// ResumeHost continues what PauseHost stopped, writers first.
func (c *Cluster) ResumeHost(n *Node) error {
	if _, err := c.events.Record(check.EventResumeHost, []string{n.Name}, "writers first, then tenure run and the agent"); err != nil {
		return err
	}
	n.pausedHost = false
	return n.continueHost(c.history(n))
}

// Stop resumes whatever is paused (recording it), records the end of the
// run, then stops every watch and supervisor (their writers with them),
// every agent and the store with SIGTERM, as systemd would. It returns every problem:
// a process that had to be killed, or that had already exited.
func (c *Cluster) Stop() error {
	var errs []error
	for _, n := range c.nodes {
		switch {
		case n.pausedHost:
			errs = append(errs, c.ResumeHost(n))
		case n.paused:
			errs = append(errs, c.Resume(n))
		}
	}
	c.stalls.end()
	errs = append(errs, c.delays.close())
	if c.events != nil {
		_, err := c.events.Record(check.EventEnd, nil, "")
		errs = append(errs, err)
	}
	for _, n := range c.nodes {
		errs = append(errs, stopProc(n.Name+"'s tenure watch", n.watch))
		errs = append(errs, stopProc(n.Name+"'s tenure run", n.run))
	}
	for _, n := range c.nodes {
		errs = append(errs, stopProc(n.Name+"'s agent", n.agent))
		n.agent = nil
	}
	errs = append(errs, stopProc("the store", c.store))
	errs = append(errs, c.unmountDisks())
	if c.events != nil {
		errs = append(errs, c.events.Close())
	}
	return errors.Join(errs...)
}

// stopProc stops p with SIGTERM; one that had exited before is reported.
func stopProc(what string, p *netns.Proc) error {
	if p == nil {
		return nil
	}
	if done, err := p.Exited(); done {
		return fmt.Errorf("nemesis: %s had exited before the end: %v", what, err)
	}
	if err := p.Stop(syscall.SIGTERM, stopWait); err != nil {
		return fmt.Errorf("nemesis: %s: %w", what, err)
	}
	return nil
}

// Heal records that every fault is undone: the network is whole and the
// agents the schedule means to run are running. Liveness is measured from
// here.
func (c *Cluster) Heal(detail string) error {
	_, err := c.events.Record(check.EventHeal, nil, detail)
	return err
}

// hosts are the nodes' hosts.
func (c *Cluster) hosts() []netns.Host {
	var out []netns.Host
	for _, n := range c.nodes {
		out = append(out, n.Host)
	}
	return out
}

func names(nodes []*Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}

func newKey() (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("nemesis: key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(raw), nil
}
