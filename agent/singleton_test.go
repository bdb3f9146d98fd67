package agent

import (
	"bytes"
	"context"
	"fmt"
	"github.com/tenurehq/tenure/internal/testlog"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/agent/hooks"
	"github.com/tenurehq/tenure/agent/supervise"
	"github.com/tenurehq/tenure/internal/procgroup"
)

// TestBecameLeaderHookRuns: a became-leader hook configured on every agent
// runs on the leader with its epoch in the environment.
func TestBecameLeaderHookRuns(t *testing.T) {
	c := newTestCluster(t)
	out := filepath.Join(c.dir, "hook.out")
	c.expect = 3
	for i := 1; i <= 3; i++ {
		cfg := c.config(fmt.Sprintf("n%d", i), uint64(i))
		h, err := hooks.ParseHook(`became-leader=echo "$TENURE_EVENT $TENURE_NODE $TENURE_EPOCH" >> ` + out)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Hooks = []hooks.Hook{h}
		c.start(cfg)
	}
	epoch := c.waitLeader("n3", 15*time.Second)
	want := fmt.Sprintf("became-leader n3 %d", epoch)
	eventually(t, 5*time.Second, func() error {
		b, _ := os.ReadFile(out)
		if strings.TrimSpace(string(b)) != want {
			return fmt.Errorf("hook output %q, want %q", b, want)
		}
		return nil
	})
}

// TestRunStopsChildBeforeLeaseEnds: `tenure run`'s supervisor, against real
// agents, runs the child only on the leader with TENURE_EPOCH; when the
// leader is cut off from the others, the child and a grandchild it spawned
// are gone before the old lease can end; the next term starts it again
// elsewhere with a higher epoch.
func TestRunStopsChildBeforeLeaseEnds(t *testing.T) {
	c, first, pids, finish := runOnTwoNodes(t)
	defer finish()
	leader := c.agents["n3"]
	st := leader.Status()
	deadline := time.Now().Add(time.Duration(st.LeaseRemainingMS) * time.Millisecond)
	leader.isolated.Store(true)
	defer leader.isolated.Store(false)
	for _, pid := range pids {
		waitProcessGone(t, pid, testTTL)
	}
	if late := time.Since(deadline); late >= 0 {
		t.Fatalf("child and grandchild stopped %v after the old leader's lease deadline", late)
	}
	t.Logf("child and grandchild gone %v before the lease deadline", -time.Since(deadline))
	second := waitChildEpoch(t, c, "n2", first, 15*time.Second)
	t.Logf("epoch %d on n3, then %d on n2", first, second)
}

// runOnTwoNodes starts three agents and the tenure run supervisor on n2 and
// n3, waits for the child on the leader n3, and returns the cluster, the
// first epoch, the child's and grandchild's PIDs, and a function that stops
// the supervisors and checks they ended cleanly.
func runOnTwoNodes(t *testing.T) (*testCluster, uint64, []int, func()) {
	c := newTestCluster(t)
	c.startN(3)
	first := c.waitLeader("n3", 15*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	runs := map[string]chan error{}
	for _, name := range []string{"n2", "n3"} {
		runs[name] = startRun(ctx, t, c, name)
	}
	pids := waitChild(t, c, "n3", first, 10*time.Second)
	return c, first, pids, func() {
		cancel()
		for name, done := range runs {
			if err := <-done; err != nil {
				t.Errorf("run on %s: %v", name, err)
			}
		}
	}
}

func startRun(ctx context.Context, t *testing.T, c *testCluster, name string) chan error {
	dir := filepath.Join(c.dir, "run-"+name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	script := `echo "$TENURE_EPOCH" > epoch.tmp && mv epoch.tmp epoch; sleep 1000 & echo $! > grandchild; echo $$ > child; wait`
	done := make(chan error, 1)
	go func() {
		_, err := supervise.Run(ctx, supervise.Config{
			Socket:  c.agents[name].SocketPath(),
			Command: []string{"sh", "-c", "cd " + dir + " && " + script},
			Grace:   300 * time.Millisecond,
			Logger:  testLogger(t),
			Stdout:  &bytes.Buffer{},
			Stderr:  &bytes.Buffer{},
		})
		done <- err
	}()
	return done
}

// waitChild waits until the child on name runs with epoch and returns the
// PIDs of the child and its grandchild.
func waitChild(t *testing.T, c *testCluster, name string, epoch uint64, within time.Duration) []int {
	t.Helper()
	dir := filepath.Join(c.dir, "run-"+name)
	var pids []int
	eventually(t, within, func() error {
		pids = nil
		if got := readUint(filepath.Join(dir, "epoch")); got != epoch {
			return fmt.Errorf("child on %s saw epoch %d, want %d", name, got, epoch)
		}
		for _, f := range []string{"child", "grandchild"} {
			pid := int(readUint(filepath.Join(dir, f)))
			if pid == 0 || procgroup.Gone(pid) {
				return fmt.Errorf("%s of %s not running yet", f, name)
			}
			pids = append(pids, pid)
		}
		return nil
	})
	return pids
}

// waitChildEpoch waits until the child on name runs with an epoch above
// after, and returns it.
func waitChildEpoch(t *testing.T, c *testCluster, name string, after uint64, within time.Duration) uint64 {
	t.Helper()
	var got uint64
	eventually(t, within, func() error {
		got = readUint(filepath.Join(c.dir, "run-"+name, "epoch"))
		if got <= after {
			return fmt.Errorf("child on %s has epoch %d, want > %d", name, got, after)
		}
		return nil
	})
	return got
}

func waitProcessGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	eventually(t, within, func() error {
		if !procgroup.Gone(pid) {
			return fmt.Errorf("process %d still running", pid)
		}
		return nil
	})
	_ = syscall.Kill(pid, 0)
}

func readUint(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// TestRunStopsChildOnResign: when the leader resigns, its child and
// grandchild are gone at once (the lease is released with the resign), and
// the next leader's child starts with a higher epoch.
func TestRunStopsChildOnResign(t *testing.T) {
	c, first, pids, finish := runOnTwoNodes(t)
	defer finish()
	if err := c.agents["n3"].Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		waitProcessGone(t, pid, time.Second)
	}
	second := waitChildEpoch(t, c, "n2", first, 10*time.Second)
	t.Logf("epoch %d on n3, then %d on n2 after the resign", first, second)
}

// TestRunWarnsAboutTooLongGrace: a grace that is not well under two thirds
// of the lease TTL is reported, since the command would never run.
func TestRunWarnsAboutTooLongGrace(t *testing.T) {
	c := newTestCluster(t)
	c.startN(1)
	c.waitLeader("n1", 10*time.Second)
	var logs testlog.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := supervise.Run(ctx, supervise.Config{
		Socket:  c.agents["n1"].SocketPath(),
		Command: []string{"true"},
		Grace:   testTTL,
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "grace is too long") {
		t.Fatalf("no warning about --grace %v with a %v lease; logs:\n%s", testTTL, testTTL, logs.String())
	}
}
