package agent

import (
	"cmp"
	"context"
	"fmt"
	"github.com/tenurehq/tenure/internal/testlog"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// testCluster runs real agents on 127.0.0.1: real serf, real peer transport,
// real Unix sockets, with the Local timing profile.
type testCluster struct {
	t      *testing.T
	dir    string
	agents map[string]*Agent
	seed   string        // gossip address of the first agent
	expect int           // --expect for quorum mode
	ttl    time.Duration // lease TTL; testTTL when zero
}

// testTTL is the lease TTL of test clusters.
const testTTL = 2 * time.Second

func newTestCluster(t *testing.T) *testCluster {
	// Unix socket paths must stay short (108 bytes), so use a short temp dir.
	dir, err := os.MkdirTemp("", "tenure-test-")
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, dir: dir, agents: map[string]*Agent{}}
	t.Cleanup(func() {
		for _, a := range c.agents {
			a.Halt()
		}
		os.RemoveAll(dir)
	})
	return c
}

func (c *testCluster) config(name string, id uint64) Config {
	cfg := DefaultConfig()
	cfg.Name, cfg.ID = name, id
	cfg.BindAddr = "127.0.0.1:0"
	cfg.PeerBindAddr = "127.0.0.1:0"
	cfg.SocketPath = filepath.Join(c.dir, name+".sock")
	cfg.DataDir = filepath.Join(c.dir, name)
	cfg.Profile = Local
	cfg.LeaseTTL = cmp.Or(c.ttl, testTTL)
	cfg.Expect = c.expect
	cfg.Logger = testLogger(c.t).With("agent", name)
	if c.seed != "" {
		cfg.Join = []string{c.seed}
	}
	return cfg
}

func (c *testCluster) start(cfg Config) *Agent {
	c.t.Helper()
	a, err := Start(cfg)
	if err != nil {
		c.t.Fatalf("start %s: %v", cfg.Name, err)
	}
	if c.seed == "" {
		c.seed = a.GossipAddr()
	}
	c.agents[cfg.Name] = a
	return a
}

// startN starts n1..nN with IDs 1..N, bootstrapping a roster of all N.
func (c *testCluster) startN(n int) {
	c.expect = n
	for i := 1; i <= n; i++ {
		c.start(c.config(fmt.Sprintf("n%d", i), uint64(i)))
	}
}

func (c *testCluster) halt(name string) {
	c.agents[name].Halt()
	delete(c.agents, name)
}

// waitLeader waits until every running agent reports leader with one shared
// epoch, checked through each agent's socket with the Go client.
func (c *testCluster) waitLeader(leader string, timeout time.Duration) uint64 {
	c.t.Helper()
	var epoch uint64
	eventually(c.t, timeout, func() error {
		var err error
		epoch, err = c.agreedLeader(leader)
		return err
	})
	return epoch
}

func (c *testCluster) agreedLeader(leader string) (uint64, error) {
	return agreedAmong(leader, slices.Collect(maps.Values(c.agents))...)
}

// agreedAmong returns the epoch of leader's term when every one of agents
// sees leader lead it, and only leader says it leads.
func agreedAmong(leader string, agents ...*Agent) (uint64, error) {
	var epoch uint64
	for _, a := range agents {
		st, err := socketStatus(a.SocketPath())
		if err != nil {
			return 0, err
		}
		switch {
		case st.Leader == nil || st.Leader.Node != leader:
			return 0, fmt.Errorf("%s sees leader %v, want %s", a.cfg.Name, st.Leader, leader)
		case epoch != 0 && st.Leader.Epoch != epoch:
			return 0, fmt.Errorf("%s sees epoch %d, others %d", a.cfg.Name, st.Leader.Epoch, epoch)
		case st.IsLeader != (a.cfg.Name == leader):
			return 0, fmt.Errorf("%s is_leader=%v", a.cfg.Name, st.IsLeader)
		}
		epoch = st.Leader.Epoch
	}
	return epoch, nil
}

func socketStatus(path string) (rpc.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, path)
	if err != nil {
		return rpc.Status{}, err
	}
	defer cl.Close()
	return cl.Status(ctx)
}

// eventually polls cond until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("TENURE_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return testlog.New(t, "")
}

func writeFile(dir, name, content string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600)
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
