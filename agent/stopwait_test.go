package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/agent/hooks"
	"github.com/tenurehq/tenure/internal/testlog"
	"github.com/tenurehq/tenure/rpc"
)

// TestUnconfirmedStopSendsNoRelease: a runner on the leader that never
// reports its term stopped holds the release until the lease deadline,
// and then none is sent: the next leader starts only after the old
// promises could run out, never while the runner's work might still run.
func TestUnconfirmedStopSendsNoRelease(t *testing.T) {
	c := newTestCluster(t)
	c.expect = 3
	var logs testlog.Buffer
	for i := 1; i <= 3; i++ {
		cfg := c.config(fmt.Sprintf("n%d", i), uint64(i))
		if i == 3 {
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		}
		c.start(cfg)
	}
	first := c.waitLeader("n3", 15*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, c.agents["n3"].SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	w, err := cl.WatchAsRunner(ctx, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close() // and never reports
	st := c.agents["n3"].Status()
	deadline := time.Now().Add(time.Duration(st.LeaseRemainingMS) * time.Millisecond)
	if err := c.agents["n3"].Resign(ctx); err != nil {
		t.Fatal(err)
	}
	second := c.waitLeader("n2", 3*testTTL)
	if second <= first {
		t.Fatalf("epoch %d after %d", second, first)
	}
	if early := deadline.Sub(time.Now()); early > 0 {
		t.Fatalf("n2 leads %v before n3's lease deadline: the release went out unconfirmed", early)
	}
	t.Logf("next leader %v after the old lease deadline", time.Since(deadline))
	if l := logs.String(); !strings.Contains(l, "not releasing the lease") || strings.Contains(l, "stopped; releasing its lease") {
		t.Fatalf("n3 did not give the release up at the deadline; its log:\n%s", l)
	}
}

// TestReleaseWaitsForLeadershipHooks: the leader's lost-leadership hook,
// which takes 300 ms, has finished before the next leader's became-leader
// hook runs; the hand-over still takes far less than the lease.
func TestReleaseWaitsForLeadershipHooks(t *testing.T) {
	c := newTestCluster(t)
	out := filepath.Join(c.dir, "hooks.out")
	c.expect = 3
	for i := 1; i <= 3; i++ {
		cfg := c.config(fmt.Sprintf("n%d", i), uint64(i))
		for _, spec := range []string{
			`lost-leadership=sleep 0.3; echo "lost $TENURE_NODE $TENURE_EPOCH $(date +%s%N)" >> ` + out,
			`became-leader=echo "became $TENURE_NODE $TENURE_EPOCH $(date +%s%N)" >> ` + out,
		} {
			h, err := hooks.ParseHook(spec)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Hooks = append(cfg.Hooks, h)
		}
		c.start(cfg)
	}
	first := c.waitLeader("n3", 15*time.Second)
	st := c.agents["n3"].Status()
	deadline := time.Now().Add(time.Duration(st.LeaseRemainingMS) * time.Millisecond)
	if err := c.agents["n3"].Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	var lost, became hookRun
	eventually(t, 10*time.Second, func() error {
		runs := hookRuns(out)
		lost, became = firstRun(runs, "lost", first, first), firstRun(runs, "became", first+1, ^uint64(0))
		if lost.at.IsZero() || became.at.IsZero() {
			return fmt.Errorf("hook runs so far: %+v", runs)
		}
		return nil
	})
	if !became.at.After(lost.at) {
		t.Fatalf("%s's became-leader (epoch %d) ran %v before n3's lost-leadership (epoch %d) finished",
			became.node, became.epoch, lost.at.Sub(became.at), first)
	}
	if !became.at.Before(deadline) {
		t.Fatalf("%s's became-leader ran %v after n3's lease deadline: the hand-over waited for the promises; hook runs: %+v",
			became.node, became.at.Sub(deadline), hookRuns(out))
	}
	t.Logf("%s became leader %v after n3's lost-leadership hook finished, %v before n3's lease would have ended",
		became.node, became.at.Sub(lost.at), deadline.Sub(became.at))
}

// hookRun is one line the hooks of TestReleaseWaitsForLeadershipHooks
// wrote: which event, on which node, for which term, and when.
type hookRun struct {
	event, node string
	epoch       uint64
	at          time.Time
}

func hookRuns(file string) []hookRun {
	var out []hookRun
	for _, line := range strings.Split(readText(file), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		epoch, _ := strconv.ParseUint(f[2], 10, 64)
		ns, _ := strconv.ParseInt(f[3], 10, 64)
		out = append(out, hookRun{event: f[0], node: f[1], epoch: epoch, at: time.Unix(0, ns)})
	}
	return out
}

// firstRun returns the first run of event for an epoch within [lo, hi].
func firstRun(runs []hookRun, event string, lo, hi uint64) hookRun {
	for _, r := range runs {
		if r.event == event && r.epoch >= lo && r.epoch <= hi {
			return r
		}
	}
	return hookRun{}
}

func readText(file string) string {
	b, _ := os.ReadFile(file)
	return string(b)
}
