package gossip

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// node is one test member with a recorder of its events.
type node struct {
	*Membership
	cfg Config
	rec *recorder
}

// recorder keeps every event a Membership emits.
type recorder struct {
	mu     sync.Mutex
	events []Event
	closed bool
}

func record(m *Membership) *recorder {
	r := &recorder{}
	go func() {
		for e := range m.Events() {
			r.mu.Lock()
			r.events = append(r.events, e)
			r.mu.Unlock()
		}
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
	}()
	return r
}

func (r *recorder) has(typ EventType, name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Type == typ && e.Member.Name == name {
			return true
		}
	}
	return false
}

func (r *recorder) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// testConfig returns a LocalTiming config for node i on a free loopback port.
func testConfig(t *testing.T, i int) Config {
	logger, _ := testLogger(t)
	name := fmt.Sprintf("n%d", i)
	return Config{
		Name:     name,
		ID:       uint64(100 + i),
		BindAddr: "127.0.0.1:0",
		PeerAddr: fmt.Sprintf("127.0.0.1:%d", 17000+i),
		Voter:    true,
		Eligible: i%2 == 0,
		Tags:     map[string]string{"zone": "z" + strconv.Itoa(i)},
		Timing:   LocalTiming(),
		Logger:   logger,
	}
}

// startNode starts a member and shuts it down when the test ends.
func startNode(t *testing.T, cfg Config) *node {
	t.Helper()
	m, err := Start(cfg)
	if err != nil {
		t.Fatalf("start %s: %v", cfg.Name, err)
	}
	t.Cleanup(func() { m.Shutdown() })
	return &node{Membership: m, cfg: cfg, rec: record(m)}
}

// startCluster starts n members, each joining the first, and waits until
// every member sees all n alive.
func startCluster(t *testing.T, n int, mod func(i int, c *Config)) []*node {
	t.Helper()
	var nodes []*node
	for i := range n {
		cfg := testConfig(t, i)
		if i > 0 {
			cfg.Join = []string{nodes[0].LocalMember().Addr}
		}
		if mod != nil {
			mod(i, &cfg)
		}
		nodes = append(nodes, startNode(t, cfg))
	}
	for _, nd := range nodes {
		waitStatus(t, 10*time.Second, nd, nodes, StatusAlive)
	}
	return nodes
}

// statusOf returns the status nd sees for name, and whether nd knows it.
func statusOf(nd *node, name string) (Status, bool) {
	for _, m := range nd.Members() {
		if m.Name == name {
			return m.Status, true
		}
	}
	return 0, false
}

// waitStatus waits until observer sees every one of targets in status s.
func waitStatus(t *testing.T, timeout time.Duration, observer *node, targets []*node, s Status) {
	t.Helper()
	for _, target := range targets {
		what := fmt.Sprintf("%s to see %s %s", observer.cfg.Name, target.cfg.Name, s)
		waitFor(t, timeout, what, func() bool {
			got, ok := statusOf(observer, target.cfg.Name)
			return ok && got == s
		})
	}
}

func TestClusterConverges(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	for _, nd := range nodes {
		members := nd.Members()
		if len(members) != 3 {
			t.Fatalf("%s sees %d members, want 3", nd.cfg.Name, len(members))
		}
		for i, m := range members {
			want := nodes[i].cfg
			if m.Name != want.Name || m.ID != want.ID || m.PeerAddr != want.PeerAddr ||
				m.Voter != want.Voter || m.Eligible != want.Eligible || m.Status != StatusAlive ||
				len(m.Tags) != 1 || m.Tags["zone"] != want.Tags["zone"] {
				t.Errorf("%s sees member %d as %+v, want config %+v", nd.cfg.Name, i, m, want)
			}
			if m.Addr != nodes[i].LocalMember().Addr {
				t.Errorf("%s sees %s at %s, it says %s", nd.cfg.Name, m.Name, m.Addr, nodes[i].LocalMember().Addr)
			}
		}
	}
	for _, nd := range nodes {
		for _, other := range nodes {
			waitFor(t, 5*time.Second, nd.cfg.Name+" join event for "+other.cfg.Name, func() bool {
				return nd.rec.has(EventJoin, other.cfg.Name)
			})
		}
	}
}

func TestLocalMemberReportsBoundPort(t *testing.T) {
	nd := startNode(t, testConfig(t, 0))
	host, port, err := net.SplitHostPort(nd.LocalMember().Addr)
	if err != nil || host != "127.0.0.1" || port == "0" {
		t.Fatalf("LocalMember().Addr = %q (%v), want 127.0.0.1 and a real port", nd.LocalMember().Addr, err)
	}
}

// TestSetTagsSpreads: new tags reach the other members, and Members shows
// them although it converted the member before (it keeps conversions of
// unchanged members).
func TestSetTagsSpreads(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	if m := nodes[0].Members()[1]; m.Tags["rack"] != "" {
		t.Fatalf("n1 starts with rack %q", m.Tags["rack"])
	}
	for _, rack := range []string{"r7", "r8"} {
		if err := nodes[1].SetTags(map[string]string{"rack": rack}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "update event and new tags", func() bool {
			if !nodes[0].rec.has(EventUpdate, "n1") {
				return false
			}
			m := nodes[0].Members()[1]
			return m.Tags["rack"] == rack && m.Tags["zone"] == "" && m.ID == 101 && m.PeerAddr == "127.0.0.1:17001"
		})
	}
	if err := nodes[1].SetTags(map[string]string{"id": "7"}); err == nil {
		t.Fatal("SetTags accepted a reserved key")
	}
}

func TestGracefulLeaveAndHardFailure(t *testing.T) {
	nodes := startCluster(t, 4, nil)
	leaver, victim, observers := nodes[3], nodes[2], nodes[:2]

	if err := leaver.Leave(); err != nil {
		t.Fatal(err)
	}
	if err := leaver.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, o := range observers {
		waitStatus(t, 5*time.Second, o, []*node{leaver}, StatusLeft)
		waitFor(t, 5*time.Second, "leave event", func() bool { return o.rec.has(EventLeave, leaver.cfg.Name) })
	}

	stopped := time.Now()
	victim.Shutdown()
	for _, o := range observers {
		waitStatus(t, 10*time.Second, o, []*node{victim}, StatusFailed)
		waitFor(t, 5*time.Second, "failed event", func() bool { return o.rec.has(EventFailed, victim.cfg.Name) })
	}
	t.Logf("failure detected by both observers after %v (bound %v)",
		time.Since(stopped), LocalTiming().FailureDetectionBound(4))
	for _, o := range observers {
		if o.rec.has(EventFailed, leaver.cfg.Name) {
			t.Errorf("%s reported the graceful leaver as failed", o.cfg.Name)
		}
	}
}

func TestShutdownIsIdempotentAndClosesEvents(t *testing.T) {
	nd := startNode(t, testConfig(t, 0))
	if err := nd.Leave(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := nd.Shutdown(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, time.Second, "events channel closed", nd.rec.isClosed)
	if err := nd.Leave(); !errors.Is(err, ErrShutdown) {
		t.Errorf("Leave after Shutdown = %v, want ErrShutdown", err)
	}
	if _, err := nd.Join(context.Background(), []string{"127.0.0.1:1"}); !errors.Is(err, ErrShutdown) {
		t.Errorf("Join after Shutdown = %v, want ErrShutdown", err)
	}
	if err := nd.SetTags(nil); !errors.Is(err, ErrShutdown) {
		t.Errorf("SetTags after Shutdown = %v, want ErrShutdown", err)
	}
}

func TestJoinRetriesUntilTargetIsUp(t *testing.T) {
	port := freePort(t)
	target := "127.0.0.1:" + strconv.Itoa(port)
	cfg := testConfig(t, 1)
	logger, counts := testLogger(t, "join failed", "joined the cluster")
	cfg.Logger = logger
	cfg.Join = []string{target}
	cfg.JoinRetryInterval, cfg.JoinRetryMax = 50*time.Millisecond, 200*time.Millisecond
	joiner := startNode(t, cfg)
	waitFor(t, 5*time.Second, "two failed join attempts", func() bool { return counts["join failed"].Load() >= 2 })

	tcfg := testConfig(t, 0)
	tcfg.BindAddr = target
	up := startNode(t, tcfg)
	both := []*node{joiner, up}
	waitStatus(t, 5*time.Second, joiner, both, StatusAlive)
	waitStatus(t, 5*time.Second, up, both, StatusAlive)
	waitFor(t, time.Second, "success logged", func() bool { return counts["joined the cluster"].Load() == 1 })
}

func TestJoinExplicit(t *testing.T) {
	a := startNode(t, testConfig(t, 0))
	b := startNode(t, testConfig(t, 1))
	n, err := b.Join(context.Background(), []string{a.LocalMember().Addr})
	if err != nil || n != 1 {
		t.Fatalf("Join = %d, %v", n, err)
	}
	waitStatus(t, 5*time.Second, a, []*node{a, b}, StatusAlive)

	port := freePort(t)
	n, err = b.Join(context.Background(), []string{"127.0.0.1:" + strconv.Itoa(port)})
	if err == nil || n != 0 {
		t.Fatalf("Join to a closed port = %d, %v; want an error", n, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Join(ctx, []string{a.LocalMember().Addr}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Join with a cancelled context = %v", err)
	}
}

// restart starts nd again with the same config and gossip port, without
// joining anyone.
func restart(t *testing.T, nd *node) *node {
	t.Helper()
	cfg := nd.cfg
	cfg.BindAddr = nd.LocalMember().Addr
	cfg.Join = nil
	return startNode(t, cfg)
}

func TestSnapshotRejoinsWithoutJoinList(t *testing.T) {
	snap := filepath.Join(t.TempDir(), "serf.snapshot")
	nodes := startCluster(t, 3, func(i int, c *Config) {
		if i == 2 {
			c.SnapshotPath = snap
			return
		}
		// Make sure only the snapshot can bring n2 back: the others neither
		// reconnect to it nor gossip to it once it failed.
		c.Timing.ReconnectInterval = time.Hour
		c.Timing.GossipToTheDeadTime = 0
	})
	nodes[2].Shutdown()
	waitStatus(t, 10*time.Second, nodes[0], nodes[2:], StatusFailed)

	back := restart(t, nodes[2])
	all := []*node{nodes[0], nodes[1], back}
	for _, nd := range all {
		waitStatus(t, 10*time.Second, nd, all, StatusAlive)
	}
}

// onlyReconnect stops members from gossiping to failed members, so that
// only serf's reconnect (a join) can bring a failed member back.
func onlyReconnect(_ int, c *Config) { c.Timing.GossipToTheDeadTime = 0 }

func TestFailedMemberIsReconnected(t *testing.T) {
	nodes := startCluster(t, 3, onlyReconnect)
	nodes[2].Shutdown()
	waitStatus(t, 10*time.Second, nodes[0], nodes[2:], StatusFailed)
	waitStatus(t, 10*time.Second, nodes[1], nodes[2:], StatusFailed)

	started := time.Now()
	back := restart(t, nodes[2])
	all := []*node{nodes[0], nodes[1], back}
	for _, nd := range all {
		waitStatus(t, 10*time.Second, nd, all, StatusAlive)
	}
	t.Logf("restarted member reconnected after %v", time.Since(started))
}

func TestReturningMemberIsGreeted(t *testing.T) {
	// a and b have never met. Tell a that b failed and came back: a must
	// greet b with a state exchange, after which each knows the other.
	a := startNode(t, testConfig(t, 0))
	b := startNode(t, testConfig(t, 1))
	failed := make(map[string]bool)
	member := b.LocalMember()
	a.noteReturns([]Event{{Type: EventFailed, Member: member}, {Type: EventJoin, Member: member}}, failed)
	both := []*node{a, b}
	waitStatus(t, 5*time.Second, a, both, StatusAlive)
	waitStatus(t, 5*time.Second, b, both, StatusAlive)
	if len(failed) != 0 {
		t.Fatalf("still tracked as failed: %v", failed)
	}
}

// cut blocks gossip between the nodes of side a and those of side b, in both
// directions; heal undoes it.
func cut(a, b []*node) {
	addrs := func(side []*node) map[string]bool {
		s := make(map[string]bool)
		for _, nd := range side {
			s[nd.LocalMember().Addr] = true
		}
		return s
	}
	for _, pair := range [][2][]*node{{a, b}, {b, a}} {
		far := addrs(pair[1])
		block := func(addr string, _ bool) bool { return far[addr] }
		for _, nd := range pair[0] {
			nd.net.blocked.Store(&block)
		}
	}
}

func heal(nodes []*node) {
	for _, nd := range nodes {
		nd.net.blocked.Store(nil)
	}
}

func TestPartitionHeals(t *testing.T) {
	nodes := startCluster(t, 4, onlyReconnect)
	left, right := nodes[:2], nodes[2:]
	cut(left, right)
	for _, nd := range left {
		waitStatus(t, 10*time.Second, nd, right, StatusFailed)
	}
	for _, nd := range right {
		waitStatus(t, 10*time.Second, nd, left, StatusFailed)
	}
	healed := time.Now()
	heal(nodes)
	for _, nd := range nodes {
		waitStatus(t, 10*time.Second, nd, nodes, StatusAlive)
	}
	t.Logf("partition healed after %v", time.Since(healed))
}

func TestEncryptedCluster(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	nodes := startCluster(t, 2, func(i int, c *Config) { c.EncryptKey = key })

	stranger := testConfig(t, 2)
	stranger.EncryptKey = []byte("fedcba9876543210fedcba9876543210")
	s := startNode(t, stranger)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n, err := s.Join(ctx, []string{nodes[0].LocalMember().Addr}); err == nil {
		t.Fatalf("join with the wrong key reached %d members", n)
	}
	if got := len(nodes[0].Members()); got != 2 {
		t.Fatalf("cluster has %d members after a stranger's join", got)
	}
}

func TestStartFailsCleanly(t *testing.T) {
	taken := startNode(t, testConfig(t, 0))
	tests := []struct {
		name string
		mod  func(*Config)
	}{
		{"port in use", func(c *Config) { c.BindAddr = taken.LocalMember().Addr }},
		{"snapshot dir missing", func(c *Config) { c.SnapshotPath = filepath.Join(t.TempDir(), "no", "such", "file") }},
		{"tags too large", func(c *Config) { c.Tags = map[string]string{"big": strings.Repeat("x", 600)} }},
		{"invalid", func(c *Config) { c.Name = "" }},
	}
	for _, tt := range tests {
		cfg := testConfig(t, 1)
		tt.mod(&cfg)
		if m, err := Start(cfg); err == nil {
			m.Shutdown()
			t.Errorf("%s: Start succeeded", tt.name)
		} else {
			t.Logf("%s: %v", tt.name, err)
		}
	}
}
